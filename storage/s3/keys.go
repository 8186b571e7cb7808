package s3

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/tenurehq/tenure/storage"
)

// checkKeyChars rejects what S3 cannot carry faithfully: invalid UTF-8, and
// control characters, which XML 1.0 listings cannot represent.
func checkKeyChars(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("not valid UTF-8")
	}
	for i, r := range s {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("control character %U at byte %d", r, i)
		}
	}
	return nil
}

// fullKey returns the key as S3 sees it, or an error wrapping
// storage.ErrInvalid.
func (s *Store) fullKey(key string) (string, error) {
	full := s.opts.prefix + key
	if key == "" {
		return full, fmt.Errorf("%w: empty key", storage.ErrInvalid)
	}
	if err := checkKeyChars(key); err != nil {
		return full, fmt.Errorf("%w: key %q: %v", storage.ErrInvalid, key, err)
	}
	if len(full) > MaxKeyLength {
		return full, fmt.Errorf("%w: key is %d bytes with the prefix, S3 allows %d", storage.ErrInvalid, len(full), MaxKeyLength)
	}
	return full, nil
}
