package celexpr

import (
	"encoding/base64"
	"fmt"
	"time"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

// Scalar converts a CEL null, bool, int, uint, double, string, bytes or
// timestamp to nil, bool, int64, uint64, float64, string, []byte or
// time.Time, as pgx binds them; ok is false for any other value.
func Scalar(v ref.Val) (g any, ok bool) {
	switch t := v.(type) {
	case types.Null:
		return nil, true
	case types.Bool:
		return bool(t), true
	case types.Int:
		return int64(t), true
	case types.Uint:
		return uint64(t), true
	case types.Double:
		return float64(t), true
	case types.String:
		return string(t), true
	case types.Bytes:
		return []byte(t), true
	case types.Timestamp:
		return t.Time, true
	}
	return nil, false
}

// JSON converts v to a value encoding/json renders: maps (with string keys)
// and lists element by element, timestamps as RFC 3339 strings, durations as
// time.Duration renders them, bytes as base64. Any other value, at any
// depth, is left to scalar.
func JSON(v ref.Val, scalar func(ref.Val) (any, error)) (any, error) {
	switch t := v.(type) {
	case types.Timestamp:
		return t.Time.UTC().Format(time.RFC3339Nano), nil
	case types.Duration:
		return t.Duration.String(), nil
	case types.Bytes:
		return base64.StdEncoding.EncodeToString(t), nil
	case traits.Mapper:
		out := map[string]any{}
		for it := t.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			ks, ok := k.(types.String)
			if !ok {
				return nil, fmt.Errorf("map key %v is not a string", k)
			}
			val, err := JSON(t.Get(k), scalar)
			if err != nil {
				return nil, err
			}
			out[string(ks)] = val
		}
		return out, nil
	case traits.Lister:
		out := []any{}
		for it := t.Iterator(); it.HasNext() == types.True; {
			val, err := JSON(it.Next(), scalar)
			if err != nil {
				return nil, err
			}
			out = append(out, val)
		}
		return out, nil
	}
	return scalar(v)
}
