package s3

import (
	"context"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenurehq/tenure/storage/internal/childspan"
)

// tracerName is the instrumentation scope of the S3 client spans.
const tracerName = "github.com/tenurehq/tenure/storage/s3"

// WithTracing returns a client option that records a client span per S3
// operation (S3.PutObject, ...), with the OTel semantic conventions of the
// AWS SDK instrumentation: rpc.system.name aws-api, rpc.method
// S3/PutObject, aws.region, the HTTP status and aws.request_id. A span is
// recorded only for a call made under a span (see package childspan): the
// runner's background LISTs and clock reads record none. nil tp means the
// global provider, one set later included.
//
// It is what go.opentelemetry.io/contrib's otelaws did, which is
// deprecated and would link the DynamoDB, SQS and SNS clients into every
// binary for their attribute setters.
func WithTracing(tp trace.TracerProvider) func(*awss3.Options) {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	m := spanMiddleware{tracer: childspan.TracerProvider(tp).Tracer(tracerName)}
	return func(o *awss3.Options) { o.APIOptions = append(o.APIOptions, m.add) }
}

// spanMiddleware starts the operation's span in the initialize step,
// around the whole call (retries included), and annotates it with what
// the last attempt's response said in the deserialize step.
type spanMiddleware struct{ tracer trace.Tracer }

func (m spanMiddleware) add(stack *middleware.Stack) error {
	if err := stack.Initialize.Add(middleware.InitializeMiddlewareFunc("TenureOTelSpan", m.initialize), middleware.After); err != nil {
		return err
	}
	return stack.Deserialize.Add(middleware.DeserializeMiddlewareFunc("TenureOTelResponse", annotate), middleware.Before)
}

func (m spanMiddleware) initialize(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
	middleware.InitializeOutput, middleware.Metadata, error,
) {
	service, op := awsmiddleware.GetServiceID(ctx), awsmiddleware.GetOperationName(ctx)
	ctx, span := m.tracer.Start(ctx, service+"."+op,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			semconv.RPCSystemNameKey.String("aws-api"),
			semconv.RPCMethod(service+"/"+op),
			attribute.String("aws.region", awsmiddleware.GetRegion(ctx)),
		))
	defer span.End()
	out, md, err := next.HandleInitialize(ctx, in)
	if err != nil {
		span.SetAttributes(semconv.ErrorType(err))
		span.SetStatus(codes.Error, err.Error())
	}
	return out, md, err
}

func annotate(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (
	middleware.DeserializeOutput, middleware.Metadata, error,
) {
	out, md, err := next.HandleDeserialize(ctx, in)
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return out, md, err
	}
	if resp, ok := out.RawResponse.(*smithyhttp.Response); ok {
		span.SetAttributes(semconv.HTTPResponseStatusCode(resp.StatusCode))
	}
	if id, ok := awsmiddleware.GetRequestIDMetadata(md); ok {
		span.SetAttributes(semconv.AWSRequestID(id))
	}
	return out, md, err
}
