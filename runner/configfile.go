package runner

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// KeyError is a setting that is wrong where it was written: its key, the
// line of the config file that sets it, and what is wrong with it. It
// wraps ErrInvalidConfig.
type KeyError struct {
	Key     string // dotted key path, e.g. "detachment.margin"
	Line    int    // line in the config file; 0 when it does not come from one
	Problem string // what is wrong, e.g. `invalid duration "10"`
	Hint    string // what would do, e.g. "want e.g. 10s"; may be empty
}

func (e *KeyError) Error() string {
	var b strings.Builder
	b.WriteString(e.Key)
	b.WriteString(": ")
	b.WriteString(e.Problem)
	if e.Line > 0 {
		fmt.Fprintf(&b, " (line %d)", e.Line)
	}
	if e.Hint != "" {
		b.WriteString(": ")
		b.WriteString(e.Hint)
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrInvalidConfig) hold.
func (e *KeyError) Unwrap() error { return ErrInvalidConfig }

// decodeYAML decodes a config file and records which keys it set. It walks
// the YAML nodes itself rather than letting the YAML package decode into
// Config, so that every error names the key path and line the user wrote
// (`etcd.endpoint: unknown key (line 3)`) instead of a Go type
// (`field endpoint not found in type runner.EtcdConfig`), and so that all
// of a file's mistakes are reported at once. Only the first document of
// the file is read; a key given an empty (null) value keeps its default,
// as if absent.
func (c *Config) decodeYAML(b []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return err // a syntax error: the YAML package names the line
	}
	if len(doc.Content) == 0 {
		return nil // empty, or only comments
	}
	d := fileDecoder{}
	root := resolveAlias(doc.Content[0])
	if isNull(root) {
		return nil
	}
	d.mapping(reflect.ValueOf(c).Elem(), root, "")
	return errors.Join(d.errs...)
}

// fileDecoder collects the errors of one file's decoding.
type fileDecoder struct {
	errs []error
}

func (d *fileDecoder) fail(key string, line int, problem, hint string) {
	d.errs = append(d.errs, &KeyError{Key: key, Line: line, Problem: problem, Hint: hint})
}

// mapping decodes the mapping n into the struct v, whose keys start with
// prefix ("" at the top, "etcd." in the etcd section).
func (d *fileDecoder) mapping(v reflect.Value, n *yaml.Node, prefix string) {
	n = resolveAlias(n)
	if n.Kind != yaml.MappingNode {
		key := strings.TrimSuffix(prefix, ".")
		if key == "" {
			d.errs = append(d.errs, fmt.Errorf("%w: the file must be a mapping of keys (key: value lines), not %s (line %d)", ErrInvalidConfig, describeNode(n), n.Line))
			return
		}
		d.fail(key, n.Line, "is a section, not "+describeNode(n), "want its keys below it, indented ("+strings.Join(sectionKeys(v.Type()), ", ")+")")
		return
	}
	fields := yamlFields(v.Type())
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		if kn.Tag == "!!merge" { // "<<: *anchor" merges a mapping (or a list of them)
			d.merge(v, resolveAlias(vn), prefix)
			continue
		}
		key := prefix + kn.Value
		if first, dup := seen[kn.Value]; dup {
			d.fail(key, kn.Line, fmt.Sprintf("set twice (first at line %d)", first), "")
			continue
		}
		seen[kn.Value] = kn.Line
		idx, ok := fields[kn.Value]
		if !ok {
			d.fail(key, kn.Line, "unknown key", unknownKeyHint(key, v.Type(), prefix))
			continue
		}
		f := v.Field(idx)
		if isNull(resolveAlias(vn)) {
			continue
		}
		if isSection(f.Type()) {
			d.mapping(f, vn, key+".")
			continue
		}
		d.leaf(f, resolveAlias(vn), key)
	}
}

func (d *fileDecoder) merge(v reflect.Value, n *yaml.Node, prefix string) {
	if n.Kind == yaml.SequenceNode {
		for _, m := range n.Content {
			d.mapping(v, m, prefix)
		}
		return
	}
	d.mapping(v, n, prefix)
}

// leaf decodes the value n of key into the field f and reports whether it
// did. Durations parse as everywhere else (Duration.UnmarshalText); other
// values as YAML decodes them into the field's type, with an error that
// says what the key wants instead of naming the Go type.
func (d *fileDecoder) leaf(f reflect.Value, n *yaml.Node, key string) bool {
	if f.Type() == reflect.TypeFor[Duration]() {
		if n.Kind != yaml.ScalarNode {
			d.fail(key, n.Line, "is "+describeNode(n)+", not a duration", "want e.g. 10s")
			return false
		}
		var dur Duration
		if err := dur.UnmarshalText([]byte(n.Value)); err != nil {
			d.fail(key, n.Line, fmt.Sprintf("invalid duration %q", n.Value), "want e.g. "+durationExample(n.Value))
			return false
		}
		f.Set(reflect.ValueOf(dur))
		return true
	}
	// Decode into a scratch value, so that a failure leaves the default.
	scratch := reflect.New(f.Type())
	if err := n.Decode(scratch.Interface()); err != nil {
		d.fail(key, n.Line, valueProblem(n), wantOf(f.Type()))
		return false
	}
	f.Set(scratch.Elem())
	return true
}

// valueProblem says what was written: the scalar quoted, else its kind.
func valueProblem(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		return fmt.Sprintf("invalid value %q", n.Value)
	}
	return "invalid value: " + describeNode(n)
}

// wantOf says what a key of type t takes, in the config's words.
func wantOf(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int:
		return "want a whole number"
	case reflect.Float64:
		return "want a number"
	case reflect.Bool:
		return "want true or false"
	case reflect.String:
		return "want a single value (quote it if it contains ': ' or starts with a special character)"
	case reflect.Slice:
		return "want a list, e.g. [a, b] or one item per line starting with '- '"
	}
	return "want a " + t.Kind().String()
}

// durationExample suggests the duration a bare number probably meant: "10"
// → "10s".
func durationExample(v string) string {
	if _, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
		return strings.TrimSpace(v) + "s (a number needs a unit: ms, s, m or h)"
	}
	return "500ms, 10s, 2m or 1h30m"
}

func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("the value %q", n.Value)
	}
	return "an unexpected node"
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// isSection reports whether a field of type t holds keys of its own.
func isSection(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && t != reflect.TypeFor[Duration]()
}

// yamlFields maps the yaml names of struct t's fields to their indexes.
func yamlFields(t reflect.Type) map[string]int {
	out := map[string]int{}
	for i := 0; i < t.NumField(); i++ {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if tag != "" && tag != "-" {
			out[tag] = i
		}
	}
	return out
}

// sectionKeys lists the keys of struct t, in declaration order.
func sectionKeys(t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if tag != "" && tag != "-" {
			out = append(out, tag)
		}
	}
	return out
}

// unknownKeyHint suggests the known key closest to key (one typo away, or
// the same name in another section), else lists the keys of its section.
func unknownKeyHint(key string, section reflect.Type, prefix string) string {
	if s := closestKey(key); s != "" {
		return "did you mean " + s + "?"
	}
	if prefix == "" {
		return "`tenure run --help` lists the keys"
	}
	return fmt.Sprintf("%s has %s", strings.TrimSuffix(prefix, "."), strings.Join(sectionKeys(section), ", "))
}

// closestKey returns the config key (or section) nearest to key, or "" when
// none is near enough to be a likely typo.
func closestKey(key string) string {
	candidates := Keys()
	for _, k := range Keys() {
		if sec, _, ok := strings.Cut(k, "."); ok && !slices.Contains(candidates, sec) {
			candidates = append(candidates, sec)
		}
	}
	_, last := cutLast(key)
	best, bestScore := "", len(key)/4+2
	for _, c := range candidates {
		score := editDistance(key, c)
		if _, cl := cutLast(c); cl == last && c != key {
			score = min(score, 1) // the right name in the wrong section
		}
		if score < bestScore {
			best, bestScore = c, score
		}
	}
	return best
}

func cutLast(key string) (section, name string) {
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		return key[:i], key[i+1:]
	}
	return "", key
}

// editDistance is the Levenshtein distance between a and b, in bytes (keys
// are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
