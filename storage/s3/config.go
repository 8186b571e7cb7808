package s3

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/tenurehq/tenure/storage"
)

// Limits of ClientConfig's retry settings.
const (
	// MaxAttemptsLimit is the largest ClientConfig.MaxAttempts accepted: more
	// attempts only hide an outage from the caller's own retry policy.
	MaxAttemptsLimit = 10
)

// ClientConfig describes how to reach an S3 endpoint. Build a client from it
// with NewClient.
type ClientConfig struct {
	// Endpoint is the base URL of the S3 API, scheme included, e.g.
	// "http://127.0.0.1:7070" or "https://s3.eu-west-1.amazonaws.com". Empty
	// means AWS's own endpoint for Region.
	Endpoint string
	// Region is the region requests are signed for. Required; S3-compatible
	// servers usually accept "us-east-1".
	Region string
	// UsePathStyle addresses buckets as <endpoint>/<bucket> instead of
	// <bucket>.<endpoint>; most S3-compatible servers need it.
	UsePathStyle bool
	// AccessKey and SecretKey are static credentials, SessionToken an
	// optional session token for them. With AccessKey and SecretKey empty the
	// SDK's default credential chain is used (environment, shared files, web
	// identity, ECS and EC2 instance roles).
	AccessKey    string
	SecretKey    string
	SessionToken string
	// MaxAttempts bounds the SDK's attempts per request, the first included;
	// 1 disables retries, 0 means DefaultClientConfig's. At most
	// MaxAttemptsLimit.
	MaxAttempts int
	// MaxBackoff caps the delay between two attempts; 0 means
	// DefaultClientConfig's. Attempts stay within the store's request timeout
	// whatever the backoff.
	MaxBackoff time.Duration
}

// DefaultClientConfig returns the retry defaults; the caller fills in the
// endpoint, region and credentials.
func DefaultClientConfig() ClientConfig {
	return ClientConfig{
		Region:      "us-east-1",
		MaxAttempts: 3,
		MaxBackoff:  time.Second,
	}
}

// ConfigError reports an invalid configuration field. It matches
// storage.ErrInvalid with errors.Is.
type ConfigError struct {
	Field   string // the field or option, e.g. "Endpoint" or "WithPrefix"
	Problem string // what is wrong with it
}

// Error returns "s3: config <field>: <problem>".
func (e *ConfigError) Error() string { return "s3: config " + e.Field + ": " + e.Problem }

// Is reports storage.ErrInvalid.
func (e *ConfigError) Is(target error) bool { return target == storage.ErrInvalid }

// Validate reports the first invalid field as a *ConfigError.
func (c ClientConfig) Validate() error {
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		switch {
		case err != nil:
			return &ConfigError{"Endpoint", fmt.Sprintf("%q is not a URL: %v", c.Endpoint, err)}
		case u.Scheme != "http" && u.Scheme != "https":
			return &ConfigError{"Endpoint", fmt.Sprintf("%q: scheme must be http or https", c.Endpoint)}
		case u.Host == "":
			return &ConfigError{"Endpoint", fmt.Sprintf("%q has no host", c.Endpoint)}
		case u.RawQuery != "" || u.Fragment != "":
			return &ConfigError{"Endpoint", fmt.Sprintf("%q must not have a query or fragment", c.Endpoint)}
		}
	}
	if c.Region == "" {
		return &ConfigError{"Region", "required (S3-compatible servers usually accept \"us-east-1\")"}
	}
	if strings.ContainsAny(c.Region, " \t\r\n/") {
		return &ConfigError{"Region", fmt.Sprintf("%q is not a region name", c.Region)}
	}
	if (c.AccessKey == "") != (c.SecretKey == "") {
		if c.AccessKey == "" {
			return &ConfigError{"AccessKey", "required when SecretKey is set"}
		}
		return &ConfigError{"SecretKey", "required when AccessKey is set"}
	}
	if c.SessionToken != "" && c.AccessKey == "" {
		return &ConfigError{"SessionToken", "requires AccessKey and SecretKey"}
	}
	if c.MaxAttempts < 0 || c.MaxAttempts > MaxAttemptsLimit {
		return &ConfigError{"MaxAttempts", fmt.Sprintf("%d is outside [0, %d]", c.MaxAttempts, MaxAttemptsLimit)}
	}
	if c.MaxBackoff < 0 {
		return &ConfigError{"MaxBackoff", fmt.Sprintf("%s is negative", c.MaxBackoff)}
	}
	return nil
}

// NewClient validates c and builds an SDK client from it: checksums only
// where S3 requires them (S3-compatible servers reject or mishandle the
// newer default trailers) and a standard retryer bounded by MaxAttempts and
// MaxBackoff with no client-side retry quota. ctx bounds loading the shared
// AWS configuration.
func NewClient(ctx context.Context, c ClientConfig) (*awss3.Client, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	def := DefaultClientConfig()
	if c.MaxAttempts == 0 {
		c.MaxAttempts = def.MaxAttempts
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = def.MaxBackoff
	}
	load := []func(*config.LoadOptions) error{
		config.WithRegion(c.Region),
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = c.MaxAttempts
				o.MaxBackoff = c.MaxBackoff
				o.RateLimiter = ratelimit.None
			})
		}),
	}
	if c.AccessKey != "" {
		load = append(load, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(c.AccessKey, c.SecretKey, c.SessionToken)))
	}
	cfg, err := config.LoadDefaultConfig(ctx, load...)
	if err != nil {
		return nil, fmt.Errorf("s3: load AWS configuration: %w", err)
	}
	return awss3.NewFromConfig(cfg, func(o *awss3.Options) {
		o.UsePathStyle = c.UsePathStyle
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
	}), nil
}
