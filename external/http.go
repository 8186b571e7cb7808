package external

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
)

// defaultHandlerClient bounds connecting and the TLS handshake; the whole
// request is bounded by the task's timeout through its context.
func defaultHandlerClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   5 * time.Second,
			MaxIdleConnsPerHost:   16,
			IdleConnTimeout:       90 * time.Second,
			ExpectContinueTimeout: time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func httpHandler(target string, client *http.Client) entity.HandlerFunc {
	return func(ctx context.Context, t *task.Task) (json.RawMessage, error) {
		limit := attemptTimeout(t)
		ctx, cancel := context.WithTimeoutCause(ctx, limit, fmt.Errorf("%w: no response from %s within the task timeout %s", errHandlerTimeout, target, limit))
		defer cancel()
		body, err := json.Marshal(t)
		if err != nil {
			return nil, entity.Permanent(fmt.Errorf("http handler: encode task: %w", err))
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
		if err != nil {
			return nil, entity.Permanent(fmt.Errorf("http handler %s: %w", target, err))
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json")
		req.Header.Set("Tenure-Task-Ref", t.Ref())
		req.Header.Set("Tenure-Task-Attempt", strconv.Itoa(t.Attempt))
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
		// Last thing before the request leaves: a runner paused past its
		// lease must not send it on resuming (see entity.Attached).
		if err := entity.Attached(ctx); err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			if cause := context.Cause(ctx); cause != nil {
				return nil, cause
			}
			return nil, fmt.Errorf("http handler: %w", err)
		}
		defer resp.Body.Close()
		got, readErr := io.ReadAll(io.LimitReader(resp.Body, MaxHandlerResult+1))
		code := resp.StatusCode
		switch {
		case code >= 200 && code < 300:
			if readErr != nil {
				if cause := context.Cause(ctx); cause != nil {
					return nil, cause
				}
				return nil, fmt.Errorf("http handler %s: reading the response: %w", target, readErr)
			}
			return result("http handler "+target+": response body", got)
		case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
			return nil, fmt.Errorf("http handler %s: %s (retrying): %s", target, resp.Status, head(got, handlerErrorTail))
		default:
			if ae := appErrorOf(code, got); ae != nil {
				return nil, entity.Permanent(ae)
			}
			return nil, entity.Permanent(fmt.Errorf("http handler %s: %s: %s", target, resp.Status, head(got, handlerErrorTail)))
		}
	}
}

// appErrorOf is the application error a handler's 4xx answer carries: a
// JSON object with a string "code", and optionally "message" (or "error")
// and "details". A call answered so reaches its caller as that
// entity.AppError, with the handler's status when it is one an AppError
// may have; nil when the body is not such an object.
func appErrorOf(status int, body []byte) *entity.AppError {
	var b struct {
		Code    string          `json:"code"`
		Message string          `json:"message"`
		Error   string          `json:"error"`
		Details json.RawMessage `json:"details"`
	}
	if json.Unmarshal(body, &b) != nil || b.Code == "" {
		return nil
	}
	if b.Message == "" {
		b.Message = b.Error
	}
	ae := entity.NewAppError(b.Code, b.Message).WithStatus(status)
	if len(b.Details) > 0 && string(b.Details) != "null" {
		ae.Details = b.Details
	}
	return ae
}
