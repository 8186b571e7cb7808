package s3

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/tenurehq/tenure/storage"
)

func checkConfigError(t *testing.T, what string, err error, field string) {
	t.Helper()
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != field {
		t.Fatalf("%s: got %v, want a *ConfigError for %s", what, err, field)
	}
	if !errors.Is(err, storage.ErrInvalid) || !strings.Contains(err.Error(), field) {
		t.Fatalf("%s: %v should match storage.ErrInvalid and name %s", what, err, field)
	}
}

func TestClientConfigValidate(t *testing.T) {
	if err := DefaultClientConfig().Validate(); err != nil {
		t.Fatalf("DefaultClientConfig: %v", err)
	}
	cases := []struct {
		name  string
		edit  func(*ClientConfig)
		field string
	}{
		{"endpoint without scheme", func(c *ClientConfig) { c.Endpoint = "127.0.0.1:9000" }, "Endpoint"},
		{"endpoint ftp", func(c *ClientConfig) { c.Endpoint = "ftp://host" }, "Endpoint"},
		{"endpoint without host", func(c *ClientConfig) { c.Endpoint = "http://" }, "Endpoint"},
		{"endpoint with query", func(c *ClientConfig) { c.Endpoint = "http://h/?x=1" }, "Endpoint"},
		{"endpoint unparsable", func(c *ClientConfig) { c.Endpoint = "http://[::1" }, "Endpoint"},
		{"bad region", func(c *ClientConfig) { c.Region = "us east" }, "Region"},
		{"secret without key", func(c *ClientConfig) { c.SecretKey = "s" }, "AccessKey"},
		{"key without secret", func(c *ClientConfig) { c.AccessKey = "a" }, "SecretKey"},
		{"token without keys", func(c *ClientConfig) { c.SessionToken = "t" }, "SessionToken"},
		{"negative attempts", func(c *ClientConfig) { c.MaxAttempts = -1 }, "MaxAttempts"},
		{"too many attempts", func(c *ClientConfig) { c.MaxAttempts = MaxAttemptsLimit + 1 }, "MaxAttempts"},
		{"negative backoff", func(c *ClientConfig) { c.MaxBackoff = -time.Second }, "MaxBackoff"},
	}
	for _, tc := range cases {
		c := DefaultClientConfig()
		tc.edit(&c)
		checkConfigError(t, tc.name, c.Validate(), tc.field)
		_, err := NewClient(context.Background(), c)
		checkConfigError(t, "NewClient with "+tc.name, err, tc.field)
	}
	good := DefaultClientConfig()
	good.Endpoint, good.AccessKey, good.SecretKey, good.SessionToken = "https://s3.example.com:8443/base", "a", "s", "t"
	if err := good.Validate(); err != nil {
		t.Fatalf("a complete config: %v", err)
	}
}

func TestNewValidates(t *testing.T) {
	cli := awss3.New(awss3.Options{Region: "us-east-1"})
	if _, err := New(nil, "b"); err == nil {
		t.Fatal("New with a nil client succeeded")
	} else {
		checkConfigError(t, "nil client", err, "client")
	}
	cases := []struct {
		name   string
		bucket string
		opt    Option
		field  string
	}{
		{"no bucket", "", nil, "bucket"},
		{"bucket with slash", "a/b", nil, "bucket"},
		{"prefix not UTF-8", "b", WithPrefix("\xff"), "WithPrefix"},
		{"prefix with control", "b", WithPrefix("a\nb"), "WithPrefix"},
		{"prefix too long", "b", WithPrefix(strings.Repeat("p", MaxKeyLength)), "WithPrefix"},
		{"zero timeout", "b", WithRequestTimeout(0), "WithRequestTimeout"},
		{"zero max size", "b", WithMaxObjectSize(0), "WithMaxObjectSize"},
		{"negative max age", "b", WithTimeMaxAge(-time.Second), "WithTimeMaxAge"},
		{"zero resolution", "b", WithDateResolution(0), "WithDateResolution"},
	}
	for _, tc := range cases {
		var opts []Option
		if tc.opt != nil {
			opts = append(opts, tc.opt)
		}
		_, err := New(cli, tc.bucket, opts...)
		checkConfigError(t, tc.name, err, tc.field)
	}
	s, err := New(cli, "b", WithPrefix("tenure/c/"))
	if err != nil {
		t.Fatalf("New with good options: %v", err)
	}
	if want := "https://s3.us-east-1.amazonaws.com/b"; s.endpoint != want {
		t.Fatalf("endpoint for errors = %q, want %q", s.endpoint, want)
	}
}

// apiError builds the error the SDK returns for an HTTP error response.
func apiError(status int, code string) error {
	return &smithy.OperationError{
		ServiceID:     "S3",
		OperationName: "PutObject",
		Err: &awshttp.ResponseError{
			ResponseError: &smithyhttp.ResponseError{
				Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
				Err:      &smithy.GenericAPIError{Code: code, Message: "test"},
			},
		},
	}
}

func TestClassify(t *testing.T) {
	// Answers the embedded gateway cannot be made to give, and the
	// server-dependent ones, mapped by status and code.
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	bg := context.Background()
	cases := []struct {
		op     string
		parent context.Context
		err    error
		want   error
	}{
		{opCreate, bg, apiError(412, "PreconditionFailed"), storage.ErrPrecondition},
		{opReplace, bg, apiError(412, "PreconditionFailed"), storage.ErrPrecondition},
		{opReplace, bg, apiError(409, "ConditionalRequestConflict"), storage.ErrPrecondition},
		{opCreate, bg, apiError(409, "ConditionalRequestConflict"), storage.ErrPrecondition},
		{opCreate, bg, apiError(409, ""), storage.ErrPrecondition},
		{opCreate, bg, apiError(409, "OperationAborted"), storage.ErrUnavailable},
		{opReplace, bg, apiError(404, "NoSuchKey"), storage.ErrPrecondition},
		{opGet, bg, apiError(404, "NoSuchKey"), storage.ErrNotFound},
		{opHead, bg, apiError(404, "NotFound"), storage.ErrNotFound},
		{opReplace, bg, apiError(404, "NoSuchBucket"), storage.ErrNoBucket},
		{opGet, bg, apiError(404, "NoSuchBucket"), storage.ErrNoBucket},
		{opGet, bg, apiError(403, "AccessDenied"), storage.ErrAccessDenied},
		{opHead, bg, apiError(403, "Forbidden"), storage.ErrAccessDenied},
		{opPut, bg, apiError(403, "InvalidAccessKeyId"), storage.ErrAccessDenied},
		{opPut, bg, apiError(400, "ExpiredToken"), storage.ErrAccessDenied},
		{opPut, bg, apiError(404, "XAdminUserNotFound"), storage.ErrAccessDenied},
		{opPut, bg, apiError(500, "InternalError"), storage.ErrUnavailable},
		{opPut, bg, apiError(503, "SlowDown"), storage.ErrUnavailable},
		{opPut, bg, apiError(400, "RequestTimeout"), storage.ErrUnavailable},
		{opList, bg, apiError(429, ""), storage.ErrUnavailable},
		{opGet, bg, errors.New("dial tcp: connection refused"), storage.ErrUnavailable},
		{opGet, bg, fmt.Errorf("op: %w", context.DeadlineExceeded), storage.ErrUnavailable},
		{opGet, canceled, fmt.Errorf("op: %w", context.Canceled), context.Canceled},
		{opPut, bg, smithy.InvalidParamsError{Context: "PutObjectInput"}, storage.ErrInvalid},
	}
	for _, tc := range cases {
		got := classify(tc.parent, tc.parent, tc.op, tc.err)
		// (errors.Is cannot compare InvalidParamsError, which holds a slice.)
		if !errors.Is(got, tc.want) || !strings.Contains(got.Error(), tc.err.Error()) {
			t.Errorf("classify(%s, %v) = %v, want %v wrapping the cause", tc.op, tc.err, got, tc.want)
		}
		if tc.want != storage.ErrUnavailable && errors.Is(got, storage.ErrUnavailable) {
			t.Errorf("classify(%s, %v) = %v: retryable, but should not be", tc.op, tc.err, got)
		}
	}
	// Other client errors keep their code and are no sentinel: a create
	// refused because the key is a "directory" on a file-backed server did
	// not lose a race.
	for _, e := range []error{apiError(400, "InvalidArgument"), apiError(409, "ExistingObjectIsDirectory")} {
		got := classify(bg, bg, opCreate, e)
		for _, k := range []error{storage.ErrPrecondition, storage.ErrNotFound, storage.ErrUnavailable, storage.ErrAccessDenied, storage.ErrNoBucket} {
			if errors.Is(got, k) {
				t.Fatalf("%v classified as %v", e, k)
			}
		}
	}
}

// isolateAWS points the AWS SDK at empty shared config and credentials
// files and clears the variables that name a region or profile, so that a
// test sees only the AWS environment it sets up (never the machine's
// ~/.aws). It returns the config file, for the test to fill.
func isolateAWS(t *testing.T) (configFile string) {
	t.Helper()
	dir := t.TempDir()
	configFile = filepath.Join(dir, "config")
	creds := filepath.Join(dir, "credentials")
	for _, f := range []string{configFile, creds} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("AWS_CONFIG_FILE", configFile)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", creds)
	for _, k := range []string{"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"} {
		t.Setenv(k, "") // the SDK treats empty as unset
	}
	return configFile
}

var credentialScope = regexp.MustCompile(`Credential=[^/]+/[0-9]{8}/([^/]+)/s3/aws4_request`)

// signingServer is an S3 endpoint that answers 200 to everything and
// records the region of each request's signature.
func signingServer(t *testing.T) (url string, regions func() []string) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := credentialScope.FindStringSubmatch(r.Header.Get("Authorization"))
		mu.Lock()
		if m == nil {
			seen = append(seen, "unsigned: "+r.Header.Get("Authorization"))
		} else {
			seen = append(seen, m[1])
		}
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := seen
		seen = nil
		return out
	}
}

// TestRegionChain: an empty Region follows the AWS chain (AWS_REGION,
// AWS_DEFAULT_REGION, the shared config profile) before DefaultRegion, as
// the requests' signatures show.
func TestRegionChain(t *testing.T) {
	url, signed := signingServer(t)
	configFile := isolateAWS(t)
	if err := os.WriteFile(configFile, []byte("[default]\nregion = ap-south-1\n\n[profile prod]\nregion = eu-north-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	check := func(what, region, want string) {
		t.Helper()
		c := DefaultClientConfig()
		c.Endpoint, c.Region, c.UsePathStyle, c.AccessKey, c.SecretKey = url, region, true, "ak", "sk"
		cli, err := NewClient(context.Background(), c)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		s, err := New(cli, "b")
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Region(); got != want {
			t.Errorf("%s: store region %q, want %q", what, got, want)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := cli.HeadBucket(ctx, &awss3.HeadBucketInput{Bucket: aws.String("b")}); err != nil {
			t.Fatalf("%s: HeadBucket: %v", what, err)
		}
		if got := signed(); len(got) != 1 || got[0] != want {
			t.Errorf("%s: requests signed for %q, want [%s]", what, got, want)
		}
	}
	check("the default profile's region", "", "ap-south-1")
	t.Setenv("AWS_PROFILE", "prod")
	check("AWS_PROFILE's region", "", "eu-north-1")
	t.Setenv("AWS_DEFAULT_REGION", "ca-central-1")
	check("AWS_DEFAULT_REGION over the profile", "", "ca-central-1")
	t.Setenv("AWS_REGION", "eu-west-3")
	check("AWS_REGION over AWS_DEFAULT_REGION", "", "eu-west-3")
	check("Region over the environment", "sa-east-1", "sa-east-1")

	isolateAWS(t)
	check("nothing in the environment", "", "us-east-1")
	t.Setenv("AWS_REGION", "us east")
	_, err := NewClient(context.Background(), ClientConfig{AccessKey: "ak", SecretKey: "sk"})
	checkConfigError(t, "a bad AWS_REGION", err, "Region")
}
