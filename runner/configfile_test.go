package runner

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestConfigFileErrors: a config file's mistakes are named by their key
// path and line, with what the key wants, never by a Go type; all of a
// file's mistakes are reported at once.
func TestConfigFileErrors(t *testing.T) {
	// minimal takes lines 1–5 (it starts with a newline).
	for name, tc := range map[string]struct {
		file string
		want []string // each a whole line of the error
	}{
		"unknown key, one typo away": {file: minimal + "lease:\n  ttll: 5s\n",
			want: []string{"lease.ttll: unknown key (line 7): did you mean lease.ttl?"}},
		"the minimal example": {file: "etcd:\n  endpoint: http://127.0.0.1:2379\ns3:\n  bucket: b\n",
			want: []string{"etcd.endpoint: unknown key (line 2): did you mean etcd.endpoints?"}},
		"a key in the wrong section": {file: minimal + "margin: 2s\n",
			want: []string{"margin: unknown key (line 6): did you mean detachment.margin?"}},
		"unknown key, nothing close": {file: minimal + "lease:\n  frobnicate: 1\n",
			want: []string{"lease.frobnicate: unknown key (line 7): lease has ttl, keepalive_interval, keepalive_timeout"}},
		"bare number for a duration": {file: minimal + "detachment:\n  margin: 10\n",
			want: []string{`detachment.margin: invalid duration "10" (line 7): want e.g. 10s (a number needs a unit: ms, s, m or h)`}},
		"not a duration": {file: minimal + "lease:\n  ttl: ten\n",
			want: []string{`lease.ttl: invalid duration "ten" (line 7): want e.g. 500ms, 10s, 2m or 1h30m`}},
		"not a whole number": {file: minimal + "shards: many\n",
			want: []string{`shards: invalid value "many" (line 6): want a whole number`}},
		"not a boolean": {file: minimal + "entity:\n  plain_wake_notes: maybe\n",
			want: []string{`entity.plain_wake_notes: invalid value "maybe" (line 7): want true or false`}},
		"a section given a value": {file: minimal + "lease: 10s\n",
			want: []string{`lease: is a section, not the value "10s" (line 6): want its keys below it, indented (ttl, keepalive_interval, keepalive_timeout)`}},
		"a key set twice": {file: minimal + "weight: 1\nweight: 2\n",
			want: []string{"weight: set twice (first at line 6) (line 7)"}},
		"several mistakes at once": {file: minimal + "shards: many\nlease:\n  ttl: 10\n  bogus: 1\n",
			want: []string{
				`shards: invalid value "many" (line 6): want a whole number`,
				`lease.ttl: invalid duration "10" (line 8): want e.g. 10s (a number needs a unit: ms, s, m or h)`,
				"lease.bogus: unknown key (line 9)",
			}},
	} {
		t.Run(name, func(t *testing.T) {
			path := writeFile(t, tc.file)
			_, err := Load(path, nil, nil)
			if err == nil || !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Load: err = %v, want ErrInvalidConfig", err)
			}
			var ke *KeyError
			if !errors.As(err, &ke) {
				t.Errorf("no *KeyError in %v", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, "config file "+path) {
				t.Errorf("error does not name the file %s:\n%s", path, msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q:\n%s", w, msg)
				}
			}
			for _, leak := range []string{"runner.", "type ", "unmarshal", "!!"} {
				if strings.Contains(msg, leak) {
					t.Errorf("error leaks the decoder's words (%q):\n%s", leak, msg)
				}
			}
		})
	}
}

// TestConfigFileDecoding: what the file decoder accepts: lists in both
// YAML forms, flow mappings, comments only, and an empty value, which
// keeps the default and is not "set" (so that it still follows lease.ttl).
func TestConfigFileDecoding(t *testing.T) {
	c, err := Load(writeFile(t, `
etcd:
  endpoints:
    - http://127.0.0.1:2379
    - http://127.0.0.1:2380
s3: {bucket: tasks, path_style: true}
lease:
  ttl: 20s
detachment:
  margin:
weight: 1.5
groups: [a, b]
shard_groups: [a, b]
`), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Etcd.Endpoints) != 2 || c.S3.Bucket != "tasks" || !c.S3.PathStyle || c.Weight != 1.5 || len(c.Groups) != 2 {
		t.Errorf("decoded %+v", c)
	}
	if c.Lease.TTL.Std() != 20*time.Second || c.Detachment.Margin.Std() != 20*time.Second/3 {
		t.Errorf("an empty margin: ttl %s, margin %s; want the margin to follow the TTL", c.Lease.TTL, c.Detachment.Margin)
	}
	if _, err := Load(writeFile(t, "# only a comment\n"), []string{"TENURE_ETCD_ENDPOINTS=x", "TENURE_S3_BUCKET=b"}, nil); err != nil {
		t.Errorf("a file of comments: %v", err)
	}
}
