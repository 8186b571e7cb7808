package s3count

import (
	"net/http"
	"strconv"
	"strings"
)

// Op is an S3 operation as seen on the wire.
type Op string

// The operations the proxy tells apart. Object operations are on
// /<bucket>/<key>, bucket operations on /<bucket>.
const (
	// OpCreate is PutObject with If-None-Match (create if absent).
	OpCreate Op = "create"
	// OpReplace is PutObject with If-Match (compare-and-swap).
	OpReplace Op = "replace"
	// OpPut is an unconditional PutObject.
	OpPut Op = "put"
	// OpCopy is CopyObject (a PUT with x-amz-copy-source).
	OpCopy Op = "copy"
	// OpGet is GetObject.
	OpGet Op = "get"
	// OpHead is HeadObject.
	OpHead Op = "head"
	// OpDelete is DeleteObject.
	OpDelete Op = "delete"
	// OpList is ListObjectsV2 (GET on the bucket with list-type=2).
	OpList Op = "list"
	// OpListV1 is ListObjects, version 1 (GET on the bucket, no
	// sub-resource).
	OpListV1 Op = "list_v1"
	// OpHeadBucket is HeadBucket (Tenure reads the server's clock with it).
	OpHeadBucket Op = "head_bucket"
	// OpCreateBucket is CreateBucket (PUT on the bucket).
	OpCreateBucket Op = "create_bucket"
	// OpDeleteObjects is DeleteObjects (POST on the bucket with ?delete).
	OpDeleteObjects Op = "delete_objects"
	// OpOther is anything else: service-level calls (ListBuckets), bucket
	// sub-resources, multipart uploads.
	OpOther Op = "other"
)

// Price classes of S3 Standard requests.
const (
	// ClassPut is PUT, COPY, POST and LIST requests.
	ClassPut = "put_class"
	// ClassGet is GET, HEAD and every other request.
	ClassGet = "get_class"
	// ClassDelete is DELETE requests (free).
	ClassDelete = "delete"
)

// Class returns the price class of op.
func (op Op) Class() string {
	switch op {
	case OpCreate, OpReplace, OpPut, OpCopy, OpList, OpListV1, OpCreateBucket:
		return ClassPut
	case OpDelete, OpDeleteObjects:
		return ClassDelete
	}
	return ClassGet
}

// objectSubresources are query parameters that make a request on an object
// something other than the plain object operation (tagging, ACLs,
// multipart uploads …).
var objectSubresources = []string{"acl", "tagging", "uploads", "uploadId", "partNumber", "retention", "legal-hold",
	"restore", "select", "torrent", "attributes"}

// Classify returns the operation of a path-style S3 request.
func Classify(r *http.Request) Op {
	path := strings.TrimPrefix(r.URL.Path, "/")
	if path == "" {
		return OpOther // service level: ListBuckets
	}
	bucket, key, _ := strings.Cut(path, "/")
	q := r.URL.Query()
	if bucket == "" {
		return OpOther
	}
	if key == "" {
		return classifyBucket(r.Method, q)
	}
	for _, sub := range objectSubresources {
		if q.Has(sub) {
			return OpOther
		}
	}
	switch r.Method {
	case http.MethodPut:
		switch {
		case r.Header.Get("X-Amz-Copy-Source") != "":
			return OpCopy
		case r.Header.Get("If-None-Match") != "":
			return OpCreate
		case r.Header.Get("If-Match") != "":
			return OpReplace
		}
		return OpPut
	case http.MethodGet:
		return OpGet
	case http.MethodHead:
		return OpHead
	case http.MethodDelete:
		return OpDelete
	}
	return OpOther
}

func classifyBucket(method string, q map[string][]string) Op {
	has := func(k string) bool { _, ok := q[k]; return ok }
	switch method {
	case http.MethodGet:
		if len(q["list-type"]) > 0 && q["list-type"][0] == "2" {
			return OpList
		}
		// ListObjects v1 carries only listing parameters, if any.
		for k := range q {
			switch k {
			case "prefix", "delimiter", "marker", "max-keys", "encoding-type":
			default:
				return OpOther
			}
		}
		return OpListV1
	case http.MethodHead:
		return OpHeadBucket
	case http.MethodPut:
		if len(q) == 0 {
			return OpCreateBucket
		}
	case http.MethodPost:
		if has("delete") {
			return OpDeleteObjects
		}
	}
	return OpOther
}

// attempt returns the SDK's attempt number of a request from its
// amz-sdk-request header ("attempt=2; max=3"), 0 when it has none.
func attempt(r *http.Request) int {
	for _, part := range strings.Split(r.Header.Get("Amz-Sdk-Request"), ";") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "attempt="); ok {
			if n, err := strconv.Atoi(v); err == nil {
				return n
			}
		}
	}
	return 0
}
