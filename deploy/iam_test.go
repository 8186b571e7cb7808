package deploy

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/runner"
)

// s3Actions maps every S3 API call storage/s3 makes to the IAM action that
// permits it. A call missing here fails TestIAMPolicy: the policy must be
// reviewed for it.
var s3Actions = map[string]string{
	"GetObject":     "s3:GetObject",
	"HeadObject":    "s3:GetObject",
	"PutObject":     "s3:PutObject",
	"DeleteObject":  "s3:DeleteObject",
	"ListObjectsV2": "s3:ListBucket",
	// The clock refresh; under the prefix condition it is denied, and its
	// error answer still carries the Date it is for (see the S3 errors
	// alert).
	"HeadBucket": "s3:ListBucket",
}

// s3Call is a request of the AWS S3 client in storage/s3 (every one takes
// the context first; Options and the like do not).
var s3Call = regexp.MustCompile(`\.client\.([A-Z][A-Za-z0-9]+)\(ctx\b`)

// policy is an IAM policy document, decoded strictly.
type policy struct {
	Version   string
	Statement []struct {
		Sid       string
		Effect    string
		Action    stringOrList
		Resource  stringOrList
		Condition map[string]map[string]stringOrList `json:",omitempty"`
	}
}

// stringOrList is an IAM field that is a string or a list of them.
type stringOrList []string

func (s *stringOrList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = []string{one}
		return nil
	}
	return json.Unmarshal(b, (*[]string)(s))
}

// TestIAMPolicy: deploy/iam-policy.json is valid JSON, allows only s3:
// actions, exactly those of the calls storage/s3 makes, objects only under
// the cluster's prefix of the ConfigMap's bucket, and listing only with
// that prefix.
func TestIAMPolicy(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "deploy", "iam-policy.json"))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var p policy
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("iam-policy.json: %v", err)
	}
	if p.Version != "2012-10-17" {
		t.Errorf("Version %q, want 2012-10-17", p.Version)
	}

	used := map[string]bool{}
	for _, call := range storageS3Calls(t) {
		action, ok := s3Actions[call]
		if !ok {
			t.Errorf("storage/s3 calls %s, which s3Actions does not map to an IAM action: review iam-policy.json", call)
			continue
		}
		used[action] = true
	}

	cfg := podConfig(t, loadKit(t))
	bucketARN := "arn:aws:s3:::" + cfg.S3.Bucket
	prefix := runner.S3Prefix(cfg)
	granted := map[string]bool{}
	for _, s := range p.Statement {
		if s.Effect != "Allow" {
			t.Errorf("statement %s: effect %s, want Allow only", s.Sid, s.Effect)
		}
		for _, a := range s.Action {
			if !strings.HasPrefix(a, "s3:") || strings.Contains(a, "*") {
				t.Errorf("statement %s: action %s: want named s3: actions only", s.Sid, a)
			}
			granted[a] = true
			if a == "s3:ListBucket" {
				if !slices.Equal(s.Resource, []string{bucketARN}) {
					t.Errorf("statement %s: s3:ListBucket on %v, want %s", s.Sid, s.Resource, bucketARN)
				}
				if got := s.Condition["StringLike"]["s3:prefix"]; !slices.Equal(got, []string{prefix + "*"}) {
					t.Errorf("statement %s: s3:ListBucket with condition %v, want StringLike s3:prefix %s*", s.Sid, s.Condition, prefix)
				}
				continue
			}
			if !slices.Equal(s.Resource, []string{bucketARN + "/" + prefix + "*"}) {
				t.Errorf("statement %s: %s on %v, want only %s/%s*", s.Sid, a, s.Resource, bucketARN, prefix)
			}
		}
	}
	if !mapsEqual(granted, used) {
		t.Errorf("the policy grants %v; storage/s3's calls need %v", mapsKeys(granted), mapsKeys(used))
	}
}

// storageS3Calls returns the S3 client methods storage/s3's non-test
// sources call.
func storageS3Calls(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "storage", "s3", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range s3Call.FindAllStringSubmatch(string(b), -1) {
			seen[m[1]] = true
		}
	}
	if len(seen) < 4 {
		t.Fatalf("found the S3 calls %v in storage/s3: is the pattern still finding them?", mapsKeys(seen))
	}
	return mapsKeys(seen)
}

func mapsEqual(a, b map[string]bool) bool {
	return slices.Equal(mapsKeys(a), mapsKeys(b))
}
