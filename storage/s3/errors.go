package s3

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/smithy-go"

	"github.com/tenurehq/tenure/storage"
)

// Operation names, as they appear in storage.OpError.Op and in Observer
// calls.
const (
	opCreate     = "create"
	opReplace    = "replace"
	opPut        = "put"
	opGet        = "get"
	opHead       = "head"
	opDelete     = "delete"
	opList       = "list"
	opCheck      = "check"
	opServerTime = "servertime"
)

// accessDeniedCodes are the S3 error codes for rejected credentials or
// missing permissions. XAdminUserNotFound is VersityGW's (with a 404) for an
// unknown access key.
var accessDeniedCodes = map[string]bool{
	"AccessDenied":                 true,
	"AllAccessDisabled":            true,
	"InvalidAccessKeyId":           true,
	"SignatureDoesNotMatch":        true,
	"InvalidToken":                 true,
	"ExpiredToken":                 true,
	"TokenRefreshRequired":         true,
	"AccountProblem":               true,
	"InvalidSecurity":              true,
	"AuthorizationHeaderMalformed": true,
	"XAdminUserNotFound":           true,
}

// unavailableCodes are error codes that mean "try again later" whatever
// their status.
var unavailableCodes = map[string]bool{
	"SlowDown":            true,
	"ServiceUnavailable":  true,
	"InternalError":       true,
	"RequestTimeout":      true,
	"Throttling":          true,
	"ThrottlingException": true,
	"OperationAborted":    true, // 409: a conflicting operation is in progress
}

// classify joins err, an SDK error of operation op, with the storage
// sentinel it means. parent is the caller's context and call the one the
// request ran under (parent with the request timeout): a cancellation by the
// caller is reported as such, not as an outage.
func classify(parent, call context.Context, op string, err error) error {
	var code string
	var api smithy.APIError
	if errors.As(err, &api) {
		code = api.ErrorCode()
	}
	var status int
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	switch {
	case code == "PreconditionFailed" || code == "ConditionalRequestConflict" ||
		status == 412 || (status == 409 && code == ""):
		return storage.Wrap(storage.ErrPrecondition, err)
	case code == "NoSuchBucket":
		return storage.Wrap(storage.ErrNoBucket, err)
	case accessDeniedCodes[code] || status == 401 || status == 403:
		return storage.Wrap(storage.ErrAccessDenied, err)
	case code == "NoSuchKey" || code == "NotFound" || status == 404:
		if op == opReplace {
			// If-Match on a key that vanished: servers answer 404 or 412.
			return storage.Wrap(storage.ErrPrecondition, err)
		}
		return storage.Wrap(storage.ErrNotFound, err)
	case unavailableCodes[code] || status >= 500 || status == 429:
		return storage.Wrap(storage.ErrUnavailable, err)
	case status != 0:
		// Any other answer from the server: keep its code and message.
		return err
	}
	var invalid smithy.InvalidParamsError
	if errors.As(err, &invalid) {
		return storage.Wrap(storage.ErrInvalid, err)
	}
	if errors.Is(parent.Err(), context.Canceled) {
		return storage.Wrap(context.Canceled, err)
	}
	// No response: connection refused or reset, DNS, TLS, or no answer
	// within the timeout. Keep the deadline in the chain even where the SDK
	// reports it only in words, so callers can tell with errors.Is.
	if ce := call.Err(); ce != nil && !errors.Is(err, ce) {
		err = fmt.Errorf("%w (%w)", err, ce)
	}
	return storage.Wrap(storage.ErrUnavailable, err)
}
