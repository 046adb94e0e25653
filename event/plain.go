package event

import (
	"bytes"
	"strconv"
	"strings"
)

// PlainNumbers rewrites every number of the JSON document raw that is
// written with an exponent into plain decimal notation, digit for digit as
// PostgreSQL's jsonb renders it (1e-3 → 0.001, 1.50e1 → 15.0, 0e-2 →
// 0.00). The write path stores envelopes as jsonb and publishes that
// rendering: checked in this form, an event's size and numbers are those
// the relay will send and the bridge will decode. Numbers without an
// exponent, strings and structure are left as they are. A number whose
// plain form would be longer than MaxSize is refused as invalid.
func PlainNumbers(raw []byte) ([]byte, error) {
	if !bytes.ContainsAny(raw, "eE") {
		return raw, nil
	}
	var out []byte
	last := 0 // raw[last:] is not yet copied to out
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '"':
			i = skipString(raw, i)
		case c == '-' || (c >= '0' && c <= '9'):
			j := i + 1
			for j < len(raw) && strings.IndexByte("0123456789.eE+-", raw[j]) >= 0 {
				j++
			}
			tok := string(raw[i:j])
			if strings.ContainsAny(tok, "eE") {
				plain, err := plainDecimal(tok)
				if err != nil {
					return nil, err
				}
				out = append(append(out, raw[last:i]...), plain...)
				last = j
			}
			i = j
		default:
			i++
		}
	}
	if out == nil {
		return raw, nil
	}
	return append(out, raw[last:]...), nil
}

// skipString returns the index after the JSON string starting at raw[i].
func skipString(raw []byte, i int) int {
	for i++; i < len(raw); i++ {
		switch raw[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// plainDecimal is the JSON number tok (with an exponent) in plain decimal
// notation, with as many fraction digits as PostgreSQL's numeric keeps:
// those of the mantissa less the exponent.
func plainDecimal(tok string) (string, error) {
	neg := strings.HasPrefix(tok, "-")
	tok = strings.TrimPrefix(tok, "-")
	mant, expStr, _ := strings.Cut(strings.ToLower(tok), "e")
	exp, err := strconv.Atoi(expStr)
	if err != nil || exp > MaxSize || exp < -MaxSize {
		return "", invalid("payload number %s is out of range", tok)
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	scale := max(len(frac)-exp, 0) // fraction digits kept
	digits := strings.TrimLeft(intPart+frac, "0")
	point := len(intPart) + exp - (len(intPart+frac) - len(digits)) // digits before the point
	if digits == "" {
		s := "0"
		if scale > 0 {
			s += "." + strings.Repeat("0", scale)
		}
		if len(s) > MaxSize {
			return "", invalid("payload number %s is %d digits in plain notation, more than an event may hold", tok, len(s))
		}
		return s, nil
	}
	if n := max(point, 0) + scale + 2; n > MaxSize {
		return "", invalid("payload number %s is %d digits in plain notation, more than an event may hold", tok, n)
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	switch {
	case point <= 0:
		b.WriteString("0.")
		b.WriteString(strings.Repeat("0", -point))
		b.WriteString(digits)
		b.WriteString(strings.Repeat("0", max(scale-(-point+len(digits)), 0)))
	case point >= len(digits):
		b.WriteString(digits)
		b.WriteString(strings.Repeat("0", point-len(digits)))
		if scale > 0 {
			b.WriteString("." + strings.Repeat("0", scale))
		}
	default:
		b.WriteString(digits[:point])
		b.WriteByte('.')
		b.WriteString(digits[point:])
		b.WriteString(strings.Repeat("0", max(scale-(len(digits)-point), 0)))
	}
	return b.String(), nil
}
