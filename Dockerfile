# syntax=docker/dockerfile:1
# The tenure image: a static binary on distroless/static, non-root.
#   docker build --build-arg VERSION=v1.2.3 -t REGISTRY/tenure:v1.2.3 .
# The build flags live in deploy/build-binary.sh, which deploy's tests run
# too (this machine builds no images): change them there. It builds the
# release binary (-tags release): no `tenure dev` or `tenure bench`, so no
# embedded etcd server or S3 gateway in the image.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG TARGETOS
ARG TARGETARCH
RUN GOOS=$TARGETOS GOARCH=$TARGETARCH sh deploy/build-binary.sh /out/tenure "$VERSION"

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/tenure /tenure
USER 65532:65532
ENTRYPOINT ["/tenure"]
CMD ["run"]
