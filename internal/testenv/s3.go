package testenv

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/tenurehq/tenure/internal/embedded"
)

// S3 is the embedded VersityGW gateway shared by a test binary (VersityGW
// allows one per process).
type S3 struct {
	*embedded.S3
	client *awss3.Client
}

var (
	sharedS3Once sync.Once
	sharedS3     *S3
	sharedS3Err  error
)

// Test credentials of the shared gateway.
const (
	S3AccessKey = "tenure-test-access"
	S3SecretKey = "tenure-test-secret-key"
)

// SharedS3 returns the shared gateway, starting it on first use. Tests
// isolate themselves with Bucket. Starting it changes the process working
// directory (see internal/embedded): resolve relative paths before.
func SharedS3(t testing.TB) *S3 {
	t.Helper()
	sharedS3Once.Do(func() {
		dir, err := os.MkdirTemp("", "tenure-s3-")
		if err != nil {
			sharedS3Err = err
			return
		}
		g, err := embedded.StartS3(embedded.S3Config{Dir: dir, AccessKey: S3AccessKey, SecretKey: S3SecretKey})
		if err != nil {
			os.RemoveAll(dir)
			sharedS3Err = err
			return
		}
		sharedS3 = &S3{S3: g, client: NewS3Client(g.Endpoint(), g.Region(), S3AccessKey, S3SecretKey)}
		// At exit the gateway is left running: its graceful shutdown waits
		// up to 10s for clients' pooled connections, and the process is
		// ending anyway.
		atExit(func() { os.RemoveAll(dir) })
	})
	if sharedS3Err != nil {
		t.Fatalf("testenv: shared s3: %v", sharedS3Err)
	}
	return sharedS3
}

// NewS3Client returns a path-style SDK client with static credentials and
// bounded retries, suitable for an embedded or local gateway.
func NewS3Client(endpoint, region, accessKey, secretKey string) *awss3.Client {
	return awss3.New(awss3.Options{
		BaseEndpoint:               aws.String(endpoint),
		Region:                     region,
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(accessKey, secretKey, ""),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

// Client returns an SDK client of the gateway with root credentials.
func (s *S3) Client() *awss3.Client { return s.client }

// OwnClient returns a client like Client with a connection pool of its
// own, closed at t's cleanup, so that a test's connections do not outlive
// it in the shared pool (the goroutine leak check would see them).
func (s *S3) OwnClient(t testing.TB) *awss3.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return awss3.New(s.client.Options(), func(o *awss3.Options) { o.HTTPClient = &http.Client{Transport: tr} })
}

// Bucket creates a bucket unique to this call and removes it, with all its
// objects, at cleanup.
func (s *S3) Bucket(t testing.TB) string {
	t.Helper()
	name := Name(t, 63)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.client.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("testenv: create bucket %s: %v", name, err)
	}
	t.Cleanup(func() {
		// Removing the directory is far quicker than deleting object by
		// object, and the gateway keeps no other state for a bucket.
		os.RemoveAll(filepath.Join(s.DataDir(), name))
	})
	return name
}
