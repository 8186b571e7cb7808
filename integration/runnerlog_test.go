package integration

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The soak's runners log at info level into a file each, so that a
// flagged execution can be told apart by what its runner did around it:
// sharding logs a detachment at warn, but the re-attachment ("attached")
// only at info, as it does a detachment for a stop, a registration and a
// recovered keep-alive. The printout of a failed test keeps what it had
// at warn level (logSplitter), so that the soak's output is not flooded.

// logRunnersTo makes the runners the cluster starts from now on log at
// info level into dir/<id>.log (appended across restarts, the test's own
// marks of each process's start and exit included), their warnings and
// everything that is no log record also going to the printout.
func (c *cluster) logRunnersTo(dir string) { c.runnerLogs = dir }

// logTimeLayout is the time format of slog's text handler (RFC 3339 with
// milliseconds), which the test's own marks use too.
const logTimeLayout = "2006-01-02T15:04:05.000Z07:00"

// logSplitter writes a process's output, line by line, to its log file,
// and to keep (the printout of a failed test) every line but the log
// records below warning level: a race report, a panic or anything else
// that is not a slog text record is kept. Its methods do nothing on nil,
// a process started without a log file.
type logSplitter struct {
	mu      sync.Mutex
	file    *os.File
	keep    io.Writer
	partial []byte // a line not yet ended
}

// newLogSplitter opens (appending) the log file at path.
func newLogSplitter(path string, keep io.Writer) (*logSplitter, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening its log file: %w", err)
	}
	return &logSplitter{file: f, keep: keep}, nil
}

// Write takes the process's output; lines are written once complete.
func (s *logSplitter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.partial = append(s.partial, p...)
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			break
		}
		s.line(s.partial[:i+1])
		s.partial = s.partial[i+1:]
	}
	return len(p), nil
}

// line writes one line; a failed write to the file is not the process's
// failure, and loses only the file's copy.
func (s *logSplitter) line(l []byte) {
	s.file.Write(l)
	if !belowWarn(l) {
		s.keep.Write(l)
	}
}

// mark adds the test's own line to the file (not the printout), in the
// runners' format so that runnerLogLines places it by time.
func (s *logSplitter) mark(msg string) {
	fmt.Fprintf(s.file, "time=%s level=TEST msg=%q\n", time.Now().Format(logTimeLayout), msg)
}

// started marks the process's start.
func (s *logSplitter) started(pid int) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mark(fmt.Sprintf("test: process %d started", pid))
}

// close writes what is left of the output, marks the process's exit
// (err: how it ended) and closes the file.
func (s *logSplitter) close(err error) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.partial) > 0 {
		s.line(append(s.partial, '\n'))
		s.partial = nil
	}
	s.mark(fmt.Sprintf("test: process ended (%v)", err))
	s.file.Close()
}

// belowWarn reports whether l is a slog text record of level DEBUG or
// INFO.
func belowWarn(l []byte) bool {
	if !bytes.HasPrefix(l, []byte("time=")) {
		return false
	}
	_, rest, ok := bytes.Cut(l, []byte(" level="))
	if !ok {
		return false
	}
	return bytes.HasPrefix(rest, []byte("INFO")) || bytes.HasPrefix(rest, []byte("DEBUG"))
}

// maxRunnerLines bounds the lines runnerLogLines returns.
const maxRunnerLines = 300

// runnerLogLines returns the lines of the log file at path stamped within
// [from, to], with the lines without a stamp that follow one of them (a
// race report), at most maxRunnerLines (then a last line says how many
// more there were).
func runnerLogLines(path string, from, to time.Time) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("runner log: %w", err)
	}
	defer f.Close()
	var out []string
	more := 0
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if stamp, ok := strings.CutPrefix(l, "time="); ok {
			stamp, _, _ = strings.Cut(stamp, " ")
			at, err := time.Parse(time.RFC3339, stamp)
			in = err == nil && !at.Before(from) && !at.After(to)
		}
		if !in {
			continue
		}
		if len(out) == maxRunnerLines {
			more++
			continue
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("runner log %s: %w", path, err)
	}
	if more > 0 {
		out = append(out, fmt.Sprintf("(%d more lines)", more))
	}
	return out, nil
}

// TestRunnerLogSplit: a process logging at info level through a
// logSplitter has every line in its file, the test's marks of its start
// and exit included, while the printout keeps only its warnings, errors
// and lines that are no log record (a race report); runnerLogLines
// returns the lines stamped within a window, with the unstamped lines that
// follow them.
func TestRunnerLogSplit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.log")
	var keep bytes.Buffer
	s, err := newLogSplitter(path, &keep)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	at := func(sec int) string { return t0.Add(time.Duration(sec) * time.Second).Format(logTimeLayout) }
	s.started(42)
	// Written in pieces that split lines, as a pipe delivers them.
	out := "time=" + at(1) + " level=INFO msg=attached after=start\n" +
		"time=" + at(2) + " level=WARN msg=\"detached: shard entities stopped\" reason=lease-deadline\n" +
		"WARNING: DATA RACE\n" +
		"time=" + at(30) + " level=INFO msg=\"lease keep-alive recovered\"\n" +
		"time=" + at(31) + " level=ERROR msg=unfinished"
	for len(out) > 0 {
		n := min(len(out), 17)
		if _, err := s.Write([]byte(out[:n])); err != nil {
			t.Fatal(err)
		}
		out = out[n:]
	}
	s.close(nil)

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	file := string(b)
	for _, want := range []string{"process 42 started", "msg=attached", "detached:", "DATA RACE", "keep-alive recovered", "msg=unfinished", "process ended (<nil>)"} {
		if !strings.Contains(file, want) {
			t.Errorf("log file lacks %q:\n%s", want, file)
		}
	}
	if kept := keep.String(); strings.Contains(kept, "level=INFO") || strings.Contains(kept, "level=TEST") ||
		!strings.Contains(kept, "detached:") || !strings.Contains(kept, "DATA RACE") || !strings.Contains(kept, "msg=unfinished\n") {
		t.Errorf("printout kept:\n%s", kept)
	}
	lines, err := runnerLogLines(path, t0.Add(time.Second), t0.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 3 || !strings.Contains(lines[0], "msg=attached") || !strings.Contains(lines[1], "detached:") || lines[2] != "WARNING: DATA RACE" {
		t.Errorf("lines within [1s, 2s]: %q", lines)
	}
}
