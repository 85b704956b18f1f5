package httpapi

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// errNotString reports a field that is not a JSON string.
var errNotString = errors.New("is not a string")

// unquote decodes a JSON string literal exactly. encoding/json replaces
// every byte that is not UTF-8, and every \u escape of a lone surrogate,
// with U+FFFD, so that "\xff" and "\xfe" (or "\ud800" and "\udfff") would
// decode to one key and share one counter; unquote refuses them instead,
// and so decodes two different literals to two different strings, or to an
// error. Keys are text: a binary key is sent encoded (hex, base64).
func unquote(raw []byte) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", errNotString
	}
	body := raw[1 : len(raw)-1]
	if bytes.IndexByte(body, '\\') < 0 {
		if i := invalidUTF8(body); i >= 0 {
			return "", fmt.Errorf("is not valid UTF-8 (byte %#02x at offset %d): send text, or encode binary keys (hex, base64)", body[i], i)
		}
		return string(body), nil
	}
	var b strings.Builder
	b.Grow(len(body))
	for i := 0; i < len(body); {
		c := body[i]
		switch {
		case c == '\\':
			if i+1 >= len(body) {
				return "", errors.New("ends in the middle of an escape")
			}
			e := body[i+1]
			i += 2
			switch e {
			case '"', '\\', '/':
				b.WriteByte(e)
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'u':
				r, ok := hex4(body[i:])
				if !ok {
					return "", errors.New(`has a \u escape without four hexadecimal digits`)
				}
				i += 4
				if utf16.IsSurrogate(r) {
					lo, ok := rune(0), false
					if r < 0xdc00 && i+6 <= len(body) && body[i] == '\\' && body[i+1] == 'u' {
						lo, ok = hex4(body[i+2:])
					}
					pair := utf16.DecodeRune(r, lo)
					if !ok || pair == utf8.RuneError {
						return "", fmt.Errorf(`has the lone surrogate \u%04x, which is not a character`, r)
					}
					i += 6
					r = pair
				}
				b.WriteRune(r)
			default:
				return "", fmt.Errorf("has the unknown escape \\%c", e)
			}
		case c < 0x20:
			return "", fmt.Errorf("has the control byte %#02x unescaped", c)
		case c < utf8.RuneSelf:
			b.WriteByte(c)
			i++
		default:
			r, n := utf8.DecodeRune(body[i:])
			if r == utf8.RuneError && n <= 1 {
				return "", fmt.Errorf("is not valid UTF-8 (byte %#02x at offset %d): send text, or encode binary keys (hex, base64)", c, i)
			}
			b.Write(body[i : i+n])
			i += n
		}
	}
	return b.String(), nil
}

// invalidUTF8 returns the offset of the first byte of b that is not part
// of valid UTF-8, or -1.
func invalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return -1
}

// hex4 reads four hexadecimal digits.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
