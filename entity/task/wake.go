package task

import (
	"fmt"
	"strings"
)

// A wake-up note is what a submitter tells a shard's owner about a task it
// made ready (see Waker). Its first line is always the task's ready pointer
// key. After a submission it goes on with a hint, so that the owner can
// claim the task without reading it first (no GET on the happy
// path):
//
//	<pointer key> "\n" WakeHintVersion " " <ETag> "\n" <task object body>
//
// The body is the task object exactly as written, ETag and all, and is sent
// only when it is at most MaxWakeBody bytes; a larger task, a cancel or a
// replay sends the pointer key alone, as runners before hints always did.
//
// Compatibility, both ways. A runner that knows hints reads a note without
// one (an older submitter's) as a bare pointer key and reads the task, as
// before; a hint it cannot read (another version, a cut body) is ignored
// the same way. A runner from before hints parses the whole note as a
// pointer key: the newline makes that fail (it lands in the id or the
// entity key, neither of which may hold one), so the runner ignores the
// wake-up, and the task starts at its next reconciliation of the shard — a
// delay, never a wrong pointer. During a rolling upgrade from such a
// version, set ClientConfig.PlainWakeNotes on the submitters until every
// runner is upgraded.

// Wake-up note limits and markers.
const (
	// MaxWakeBody is the largest task object body a wake-up note carries.
	// The note is one etcd write per submission, kept in etcd's history
	// until compaction: small tasks (the no-op ones carry a few hundred
	// bytes) save the owner a GET, large ones are read from S3 as before.
	MaxWakeBody = 4 << 10
	// WakeHintVersion starts a note's hint line; a hint with another
	// version is ignored.
	WakeHintVersion = "t1"
)

// WakeHint is what a wake-up note tells the owner about the task beyond its
// pointer: the task object's ETag and its body, as the submitter wrote
// them. It is a hint: the object may have changed since (a cancel, a
// claim), so it may only be acted on by writes conditional on ETag (see
// Store.FromHint).
type WakeHint struct {
	ETag string
	Body []byte
}

// WakeNote is a parsed wake-up note.
type WakeNote struct {
	Pointer Pointer
	Hint    *WakeHint // nil: the note named the pointer only
}

// FormatWakeNote returns the note for the task pointer key, with a hint when
// h is not nil and its body is at most MaxWakeBody bytes.
func FormatWakeNote(pointerKey string, h *WakeHint) string {
	if h == nil || h.ETag == "" || len(h.Body) == 0 || len(h.Body) > MaxWakeBody || strings.ContainsAny(h.ETag, "\n") {
		return pointerKey
	}
	var b strings.Builder
	b.Grow(len(pointerKey) + len(WakeHintVersion) + len(h.ETag) + len(h.Body) + 3)
	b.WriteString(pointerKey)
	b.WriteByte('\n')
	b.WriteString(WakeHintVersion)
	b.WriteByte(' ')
	b.WriteString(h.ETag)
	b.WriteByte('\n')
	b.Write(h.Body)
	return b.String()
}

// ParseWakeNote parses a wake-up note: its pointer key (a *KeyError if that
// is malformed) and, when the note carries one this version reads, its
// hint. A hint it cannot read is dropped, not an error: the pointer alone
// is a complete wake-up.
func ParseWakeNote(note string) (WakeNote, error) {
	key, rest, hinted := strings.Cut(note, "\n")
	p, err := ParsePointer(key)
	if err != nil {
		return WakeNote{}, err
	}
	n := WakeNote{Pointer: p}
	if !hinted {
		return n, nil
	}
	line, body, ok := strings.Cut(rest, "\n")
	version, etag, vok := strings.Cut(line, " ")
	if ok && vok && version == WakeHintVersion && etag != "" && body != "" && len(body) <= MaxWakeBody {
		n.Hint = &WakeHint{ETag: etag, Body: []byte(body)}
	}
	return n, nil
}

// FromHint decodes the task a wake-up hint carries for pointer p, as Load
// would have read it, with the hint's ETag. A body that does not decode to
// a valid task of p's shard and id gives an error matching ErrBadHint (not
// ErrCorrupt: the object itself may be fine); the caller then reads the
// task instead.
func (s *Store) FromHint(p Pointer, h WakeHint) (*Task, string, error) {
	key := TaskKey(p.Shard, p.ID)
	t, err := decode(key, p.Shard, p.ID, h.Body)
	if err != nil {
		return nil, "", fmt.Errorf("%w for %s: %v", ErrBadHint, key, err)
	}
	s.Configure(t)
	return t, h.ETag, nil
}
