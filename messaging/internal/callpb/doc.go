// Package callpb is the generated Go code of the entity call protocol,
// proto/tenure/call/v1/call.proto (EntityService, CallRequest, CallReply,
// Refusal, Failure), made by `make generate` (buf with protoc-gen-go and
// protoc-gen-go-grpc at pinned versions). Package messaging is its only
// user.
//
// call.pb.go is longer than the project's files usually are (over 600
// lines) because it is generated: it is not split or edited by hand, since
// `make generate` would write it again; change the .proto instead.
package callpb
