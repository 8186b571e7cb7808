package s3count

import (
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
)

// countingBody counts the bytes read from a request body.
type countingBody struct {
	io.ReadCloser
	n atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// byteCounter is an io.Writer that only counts.
type byteCounter int

func (c *byteCounter) Write(p []byte) (int, error) {
	*c += byteCounter(len(p))
	return len(p), nil
}

// requestHeadBytes is the size of r's request line and headers as HTTP/1.1
// writes them.
func requestHeadBytes(r *http.Request) int {
	var c byteCounter
	fmt.Fprintf(&c, "%s %s %s\r\nHost: %s\r\n", r.Method, r.URL.RequestURI(), r.Proto, r.Host)
	r.Header.Write(&c)
	c.Write([]byte("\r\n"))
	return int(c)
}

// responseHeadBytes is the size of a status line and headers as HTTP/1.1
// writes them.
func responseHeadBytes(status int, h http.Header) int {
	var c byteCounter
	fmt.Fprintf(&c, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
	h.Write(&c)
	c.Write([]byte("\r\n"))
	return int(c)
}
