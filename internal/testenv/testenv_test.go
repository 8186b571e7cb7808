package testenv

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

func TestMain(m *testing.M) { Main(m) }

func TestSharedEtcdServesIsolatedPrefixes(t *testing.T) {
	e := SharedEtcd(t)
	cli := e.Client(t)
	a, b := Prefix(t), Prefix(t)
	if a == b {
		t.Fatalf("Prefix returned %q twice", a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, a+"k", "v"); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, b+"k")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Fatalf("key written under %s visible under %s", a, b)
	}
}

func TestSharedS3ConditionalCreate(t *testing.T) {
	s := SharedS3(t)
	bucket := s.Bucket(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	put := func() error {
		_, err := s.Client().PutObject(ctx, &awss3.PutObjectInput{
			Bucket: aws.String(bucket), Key: aws.String("k"),
			Body: bytes.NewReader([]byte("x")), IfNoneMatch: aws.String("*"),
		})
		return err
	}
	if err := put(); err != nil {
		t.Fatalf("first create: %v", err)
	}
	err := put()
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "PreconditionFailed" {
		t.Fatalf("second create: got %v, want PreconditionFailed", err)
	}
}
