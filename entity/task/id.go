package task

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"sync"
	"time"
)

// idState is NewID's monotonic state: the millisecond of the last id and
// its 12-bit counter.
var idState struct {
	sync.Mutex
	ms  int64
	seq uint16
}

// NewID returns a UUIDv7 (RFC 9562 §5.7) in its lowercase 8-4-4-4-12 form.
// The first 48 bits are the Unix time in milliseconds; rand_a (12 bits)
// is a counter (RFC 9562 §6.2, method 1) so that ids from one process are
// strictly increasing, as bytes and as strings, even within a millisecond or
// if the clock steps back; rand_b (62 bits) comes from crypto/rand. The
// counter starts each millisecond at a random value below 2048, leaving at
// least 2048 ids per millisecond before it borrows from the next one.
func NewID() string {
	var b [16]byte
	var seed [2]byte
	rand.Read(b[8:])
	rand.Read(seed[:])

	idState.Lock()
	ms := time.Now().UnixMilli()
	if ms > idState.ms {
		idState.ms = ms
		idState.seq = binary.BigEndian.Uint16(seed[:]) & 0x7ff
	} else {
		idState.seq++
		if idState.seq > 0xfff {
			idState.ms++
			idState.seq = 0
		}
	}
	ms, seq := idState.ms, idState.seq
	idState.Unlock()

	b[0], b[1], b[2], b[3], b[4], b[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	b[6] = 0x70 | byte(seq>>8) // version 7
	b[7] = byte(seq)
	b[8] = b[8]&0x3f | 0x80 // variant 10
	return formatUUID(b)
}

func formatUUID(b [16]byte) string {
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:36], b[10:16])
	return string(s[:])
}
