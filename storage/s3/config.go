package s3

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenurehq/tenure/storage"
)

// Limits of ClientConfig's retry settings.
const (
	// MaxAttemptsLimit is the largest ClientConfig.MaxAttempts accepted: more
	// attempts only hide an outage from the caller's own retry policy.
	MaxAttemptsLimit = 10
)

// DefaultRegion is the region of a client whose ClientConfig.Region is
// empty and whose AWS environment names none.
const DefaultRegion = "us-east-1"

// ClientConfig describes how to reach an S3 endpoint. Build a client from it
// with NewClient.
type ClientConfig struct {
	// Endpoint is the base URL of the S3 API, scheme included, e.g.
	// "http://127.0.0.1:7070" or "https://s3.eu-west-1.amazonaws.com". Empty
	// means AWS's own endpoint for Region.
	Endpoint string
	// Region is the region requests are signed for. Empty follows the AWS
	// SDK's default chain, as config.LoadDefaultConfig resolves it: the
	// AWS_REGION variable, then AWS_DEFAULT_REGION, then the region of the
	// shared config profile (AWS_PROFILE, else "default", in
	// AWS_CONFIG_FILE, else ~/.aws/config); with none of those,
	// DefaultRegion. (S3-compatible servers usually accept "us-east-1".)
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
	// MaxIdleConns is how many idle connections to the endpoint the client
	// keeps for reuse; 0 means DefaultClientConfig's. The SDK's own default
	// is 10 per host, far below the requests a runner has in flight (one
	// per running handler's claim, commit or renewal, plus submissions):
	// every request beyond it opened a new connection and closed it after,
	// a TCP (and on AWS a TLS) handshake per request — CPU on both sides,
	// and one to three extra round trips of latency on a real S3.
	MaxIdleConns int
	// TracerProvider receives the client's spans (see WithTracing); nil
	// means the global provider.
	TracerProvider trace.TracerProvider
}

// DefaultMaxIdleConns is DefaultClientConfig's MaxIdleConns: the default
// handler limit of a runner (entity.max_concurrent_per_runner), with room
// for its submissions and sweeps.
const DefaultMaxIdleConns = 320

// DefaultClientConfig returns the retry and connection defaults; the caller fills in the
// endpoint, region (or leaves it to the AWS chain) and credentials.
func DefaultClientConfig() ClientConfig {
	return ClientConfig{
		MaxAttempts:  3,
		MaxBackoff:   time.Second,
		MaxIdleConns: DefaultMaxIdleConns,
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
	if !validRegion(c.Region) {
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
	if c.MaxIdleConns < 0 {
		return &ConfigError{"MaxIdleConns", fmt.Sprintf("%d is negative", c.MaxIdleConns)}
	}
	return nil
}

func validRegion(r string) bool { return !strings.ContainsAny(r, " \t\r\n/") }

// NewClient validates c and builds an SDK client from it: the region of c
// or of the AWS chain (see ClientConfig.Region), checksums only where S3
// requires them (S3-compatible servers reject or mishandle the newer
// default trailers) and a standard retryer bounded by MaxAttempts and
// MaxBackoff with no client-side retry quota. ctx bounds loading the shared
// AWS configuration. The client's Options().Region is the region used.
// Its calls are traced (WithTracing).
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
	if c.MaxIdleConns == 0 {
		c.MaxIdleConns = def.MaxIdleConns
	}
	region := config.WithDefaultRegion(DefaultRegion)
	if c.Region != "" {
		region = config.WithRegion(c.Region)
	}
	load := []func(*config.LoadOptions) error{
		region,
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
		config.WithHTTPClient(awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
			tr.MaxIdleConns, tr.MaxIdleConnsPerHost = c.MaxIdleConns, c.MaxIdleConns
		})),
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
	if !validRegion(cfg.Region) {
		return nil, &ConfigError{"Region", fmt.Sprintf("%q, from the AWS environment (AWS_REGION, AWS_DEFAULT_REGION or the profile), is not a region name", cfg.Region)}
	}
	return awss3.NewFromConfig(cfg, func(o *awss3.Options) {
		o.UsePathStyle = c.UsePathStyle
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
	}, WithTracing(c.TracerProvider)), nil
}
