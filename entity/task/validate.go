package task

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// MaxNameLength is the longest id, type or entity id, in bytes.
const MaxNameLength = 256

// validGroup matches shard group names; the same rule as storage/etcd's.
var validGroup = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidateID checks a task id. Ids appear in object keys, so they are
// key-safe: 1 to MaxNameLength bytes of [A-Za-z0-9_:-]. No "/" (a key
// separator) and no "." (which separates the id from the entity key in a
// pointer). UUIDv7s from NewID qualify.
func ValidateID(id string) error { return checkName("id", id) }

// ValidateType checks a task type: the same rule as ids, since types are
// hashed with the entity and named in metrics and logs.
func ValidateType(typ string) error { return checkName("type", typ) }

// ValidateEntity checks an entity id: empty (no entity), or at most
// MaxNameLength bytes of valid UTF-8 without control characters. Only its
// hash (EntityKey) appears in keys, so any such text is allowed.
func ValidateEntity(entity string) error {
	if len(entity) > MaxNameLength {
		return &ValidationError{Field: "entity", Value: strconv.Quote(abbrev(entity, 40)), Rule: fmt.Sprintf("is %d bytes, the limit is %d", len(entity), MaxNameLength)}
	}
	if !utf8.ValidString(entity) {
		return &ValidationError{Field: "entity", Value: strconv.Quote(abbrev(entity, 40)), Rule: "is not valid UTF-8"}
	}
	for i, r := range entity {
		if unicode.IsControl(r) {
			return &ValidationError{Field: "entity", Value: strconv.Quote(abbrev(entity, 40)), Rule: fmt.Sprintf("has control character %U at byte %d", r, i)}
		}
	}
	return nil
}

// ValidateOp checks an operation name: empty (the type's default
// operation), or 1 to 128 bytes of [A-Za-z0-9_], starting with a letter:
// the names Go methods have.
func ValidateOp(op string) error {
	if op != "" && !validOp.MatchString(op) {
		return &ValidationError{Field: "op", Value: strconv.Quote(abbrev(op, 40)), Rule: "must match " + validOp.String()}
	}
	return nil
}

var validOp = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,127}$`)

// ValidateGroup checks a shard group name: ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$,
// the rule storage/etcd applies.
func ValidateGroup(group string) error {
	if !validGroup.MatchString(group) {
		return &ValidationError{Field: "shard group", Value: strconv.Quote(abbrev(group, 40)), Rule: "must match " + validGroup.String()}
	}
	return nil
}

func checkName(field, s string) error {
	if s == "" {
		return &ValidationError{Field: field, Rule: "must not be empty"}
	}
	if len(s) > MaxNameLength {
		return &ValidationError{Field: field, Value: strconv.Quote(abbrev(s, 40)), Rule: fmt.Sprintf("is %d bytes, the limit is %d", len(s), MaxNameLength)}
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isNameByte(c) {
			return &ValidationError{Field: field, Value: strconv.Quote(abbrev(s, 40)), Rule: fmt.Sprintf("byte %d (%q) is not one of [A-Za-z0-9_:-]", i, c)}
		}
	}
	return nil
}

func isNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == ':' || c == '-'
}

// validateJSON checks that b is empty or one valid JSON value.
func validateJSON(field string, b json.RawMessage) error {
	if len(b) > 0 && !json.Valid(b) {
		return &ValidationError{Field: field, Value: strconv.Quote(abbrev(string(b), 40)), Rule: "is not valid JSON"}
	}
	return nil
}

// Validate checks the task's structure: what Store.Load requires of a
// decoded task and Store.Write and Create of a task to store. A task marked
// corrupt (Corrupt set) needs only its id and shard.
func (t *Task) Validate() error {
	if err := ValidateID(t.ID); err != nil {
		return err
	}
	if err := ValidateGroup(t.Shard.Group); err != nil {
		return err
	}
	if t.Shard.Index < 0 {
		return &ValidationError{Field: "shard index", Value: strconv.Itoa(t.Shard.Index), Rule: "must not be negative"}
	}
	if t.Rev < 0 || t.HistoryDropped < 0 {
		return &ValidationError{Field: "rev/history_dropped", Value: fmt.Sprintf("%d/%d", t.Rev, t.HistoryDropped), Rule: "must not be negative"}
	}
	if t.Corrupt != "" {
		if t.Status != "" && !t.Status.Valid() {
			return &ValidationError{Field: "status", Value: strconv.Quote(string(t.Status)), Rule: "is not a task status"}
		}
		return nil
	}
	if err := ValidateType(t.Type); err != nil {
		return err
	}
	if err := ValidateEntity(t.Entity); err != nil {
		return err
	}
	if !t.Status.Valid() {
		return &ValidationError{Field: "status", Value: strconv.Quote(string(t.Status)), Rule: "is not a task status"}
	}
	if t.Attempt < 0 {
		return &ValidationError{Field: "attempt", Value: strconv.Itoa(t.Attempt), Rule: "must not be negative"}
	}
	if t.MaxAttempts < 1 {
		return &ValidationError{Field: "max_attempts", Value: strconv.Itoa(t.MaxAttempts), Rule: "must be at least 1"}
	}
	if t.Timeout < 0 {
		return &ValidationError{Field: "timeout", Value: t.Timeout.String(), Rule: "must not be negative"}
	}
	if err := t.Retry.Validate(); err != nil {
		return err
	}
	if t.AvailableAt.After(maxDue) {
		return &ValidationError{Field: "available_at", Value: t.AvailableAt.String(), Rule: "must be before the year 10000"}
	}
	if err := validateJSON("input", t.Input); err != nil {
		return err
	}
	if err := validateJSON("result", t.Result); err != nil {
		return err
	}
	if !t.Purging.IsZero() && !t.Status.IsTerminal() {
		return &ValidationError{Field: "purging", Value: t.Purging.String(), Rule: "may be set only on a finished task"}
	}
	if t.Status == Running && t.Claim == nil {
		return &ValidationError{Field: "claim", Rule: "a running task must carry its claim"}
	}
	return nil
}
