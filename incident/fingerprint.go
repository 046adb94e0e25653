package incident

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Fingerprint identifies one way a projection fails.
type Fingerprint struct {
	// ID is 16 hex digits of the SHA-256 of the other fields: short enough
	// for a workflow ID, long enough that two failures never share one.
	ID         string
	Projection string
	Kind       string
	SQLState   string
	// Pattern is the message with values replaced by placeholders.
	Pattern string
}

// maxPatternLen bounds the message kept in a fingerprint.
const maxPatternLen = 512

// Of fingerprints a failed attempt of projection with error kind kind.
func Of(projection, kind string, err error) Fingerprint {
	f := Fingerprint{Projection: projection, Kind: kind}
	msg := ""
	if err != nil {
		msg = err.Error()
		var pg *pgconn.PgError
		if errors.As(err, &pg) {
			f.SQLState = pg.Code
			msg = pg.Message
		}
	}
	f.Pattern = Pattern(msg)
	h := sha256.New()
	for _, s := range []string{f.Projection, f.Kind, f.SQLState, f.Pattern} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	f.ID = hex.EncodeToString(h.Sum(nil)[:8])
	return f
}

var (
	// Single-quoted literals ('abc', with '' inside) are values; double
	// quotes name columns, tables and constraints and are kept.
	quotedValue = regexp.MustCompile(`'(?:[^']|'')*'`)
	// UUIDs, then hex and decimal numbers (not digits inside identifiers).
	uuidValue   = regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)
	numberValue = regexp.MustCompile(`(?i)\b(?:0x[0-9a-f]+|-?\d+(?:\.\d+)?(?:e[+-]?\d+)?)\b`)
	// Key=(value) details of constraint violations.
	detailValue = regexp.MustCompile(`=\([^)]*\)`)
	spaces      = regexp.MustCompile(`\s+`)
)

// Pattern is msg with its values stripped: quoted literals, UUIDs, numbers
// and key details become placeholders, and whitespace is collapsed.
func Pattern(msg string) string {
	s := quotedValue.ReplaceAllString(msg, "'?'")
	s = detailValue.ReplaceAllString(s, "=(?)")
	s = uuidValue.ReplaceAllString(s, "?")
	s = numberValue.ReplaceAllString(s, "?")
	s = strings.TrimSpace(spaces.ReplaceAllString(s, " "))
	if len(s) > maxPatternLen {
		s = s[:maxPatternLen]
	}
	return s
}
