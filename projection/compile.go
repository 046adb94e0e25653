package projection

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/interpreter"
	"github.com/jackc/pgx/v5"

	"github.com/causet/projection-retry/internal/celexpr"
	"github.com/causet/projection-retry/internal/docparse"
)

var celEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(cel.Variable("event", cel.MapType(cel.StringType, cel.DynType)))
})

// compiled is one IR version ready to apply.
type compiled struct {
	doc     *Document
	version int // deployed version (0 when not deployed)
	ops     map[string]*compiledOp
}

type compiledOp struct {
	kind      string
	costLimit uint64
	cols      []column // key columns first (in key order), then set, then increment columns (sorted)
	sql       string   // the write; parameters are cols in order
	table     string   // the row lock this write takes is (table, first nkeys values)
	nkeys     int
}

type column struct {
	name string
	path string // e.g. on.TRACK_PLAYED.columns.plays_per_day
	prg  cel.Program
	// loops is set when the expression has a comprehension, the only part
	// of an evaluation that checks the context.
	loops bool
}

// compile validates doc and compiles its expressions and SQL. Unless
// runtimeOnly, an expression whose worst-case cost (see envelopeSizes) is
// over the cost limit is a problem.
func compile(doc *Document, version int, opts ...Option) (*compiled, error) {
	o := celexpr.NewOptions(opts)
	c := &docparse.Checker{}
	checkShape(c, doc)
	if doc == nil {
		return nil, docFormat.Err(c)
	}
	env, err := celEnv()
	if err != nil {
		return nil, fmt.Errorf("cel environment: %w", err)
	}
	out := &compiled{doc: doc, version: version, ops: map[string]*compiledOp{}}
	for _, et := range docparse.SortedKeys(doc.On) {
		op := doc.On[et]
		base := "on." + et
		cop := &compiledOp{kind: op.Op, costLimit: o.CostLimit}
		var keyCols, setCols, incCols []column
		prog := func(section, col, expr string, numeric bool) (column, bool) {
			path := base + "." + section + "." + col
			report := func(f string, args ...any) { c.Add(path, f, args...) }
			checked, ok := celexpr.Compile(env, expr, report)
			if !ok {
				return column{}, false
			}
			if numeric {
				switch checked.OutputType().String() {
				case "int", "uint", "double", "dyn":
				default:
					c.Add(path, "increment expression has type %s, want a number", checked.OutputType())
					return column{}, false
				}
			}
			prg, ok := celexpr.Program(env, checked, envelopeSizes, o, report)
			if !ok {
				return column{}, false
			}
			loops := len(ast.MatchDescendants(ast.NavigateAST(checked.NativeRep()), ast.KindMatcher(ast.ComprehensionKind))) > 0
			return column{name: col, path: path, prg: prg, loops: loops}, true
		}
		for _, k := range doc.Key {
			if expr, ok := op.Columns[k]; ok {
				if col, ok := prog("columns", k, expr, false); ok {
					keyCols = append(keyCols, col)
				}
			}
		}
		for _, name := range docparse.SortedKeys(op.Columns) {
			if isKey(doc, name) {
				continue
			}
			if col, ok := prog("columns", name, op.Columns[name], false); ok {
				setCols = append(setCols, col)
			}
		}
		for _, name := range docparse.SortedKeys(op.Increment) {
			if col, ok := prog("increment", name, op.Increment[name], true); ok {
				incCols = append(incCols, col)
			}
		}
		if len(c.Problems) > 0 {
			continue
		}
		cop.cols = append(append(append(cop.cols, keyCols...), setCols...), incCols...)
		cop.sql = buildSQL(doc, op.Op, keyCols, setCols, incCols)
		cop.table, cop.nkeys = doc.Table, len(keyCols)
		out.ops[et] = cop
	}
	if err := docFormat.Err(c); err != nil {
		return nil, err
	}
	return out, nil
}

func isKey(doc *Document, col string) bool {
	for _, k := range doc.Key {
		if k == col {
			return true
		}
	}
	return false
}

func quote(ident string) string { return pgx.Identifier{ident}.Sanitize() }

func quoteAll(cols []column) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = quote(c.name)
	}
	return out
}

// buildSQL renders the write of one operation; its parameters are the
// operation's columns in order. The dedupe ledger row is inserted separately,
// in the same transaction (see ledgerInsertSQL).
func buildSQL(doc *Document, op string, keyCols, setCols, incCols []column) string {
	var b strings.Builder
	table := quote(doc.Table)
	n := 0
	next := func() string { n++; return "$" + strconv.Itoa(n) }
	switch op {
	case OpDelete:
		conds := make([]string, len(keyCols))
		for i, k := range keyCols {
			conds[i] = quote(k.name) + " = " + next()
		}
		fmt.Fprintf(&b, "DELETE FROM %s WHERE %s", table, strings.Join(conds, " AND "))
	default: // upsert, increment
		all := append(append(append([]column{}, keyCols...), setCols...), incCols...)
		params := make([]string, len(all))
		for i := range all {
			params[i] = next()
		}
		fmt.Fprintf(&b, "INSERT INTO %s AS cur (%s) VALUES (%s) ON CONFLICT (%s) ",
			table, strings.Join(quoteAll(all), ", "), strings.Join(params, ", "), strings.Join(quoteAll(keyCols), ", "))
		var sets []string
		for _, c := range setCols {
			sets = append(sets, fmt.Sprintf("%s = EXCLUDED.%s", quote(c.name), quote(c.name)))
		}
		for _, c := range incCols {
			q := quote(c.name)
			sets = append(sets, fmt.Sprintf("%s = COALESCE(cur.%s, 0) + EXCLUDED.%s", q, q, q))
		}
		if len(sets) == 0 {
			b.WriteString("DO NOTHING")
		} else {
			fmt.Fprintf(&b, "DO UPDATE SET %s", strings.Join(sets, ", "))
		}
	}
	return b.String()
}

// EvalError is a CEL runtime error (kind ir_eval), e.g. "division by zero";
// Path names the expression, e.g. on.TRACK_PLAYED.columns.plays_per_day.
type EvalError = celexpr.EvalError

// jsonText marks a value that is already JSON (a CEL map or list).
type jsonText string

// eval evaluates the operation's columns for one event. An evaluation that
// ctx stops returns ctx's error, not an *EvalError: the event is not at
// fault. Only an expression with a comprehension checks ctx; the others are
// bounded by the cost limit, and faster without.
func (op *compiledOp) eval(ctx context.Context, activation interpreter.Activation) ([]any, error) {
	vals := make([]any, len(op.cols))
	for i, col := range op.cols {
		out, err := celexpr.Eval(ctx, col.prg, activation, col.path, op.costLimit, col.loops)
		if err != nil {
			return nil, err
		}
		v, err := toGo(out)
		if err != nil {
			return nil, &EvalError{Path: col.path, Err: err}
		}
		vals[i] = v
	}
	return vals, nil
}

// toGo converts a CEL value to a Go value pgx can bind.
func toGo(v ref.Val) (any, error) {
	if g, ok := celexpr.Scalar(v); ok {
		return g, nil
	}
	switch t := v.(type) {
	case types.Duration:
		return t.Duration, nil
	case traits.Mapper, traits.Lister:
		j, err := celexpr.JSON(v, jsonScalar)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(j)
		if err != nil {
			return nil, err
		}
		return jsonText(b), nil
	}
	return nil, fmt.Errorf("unsupported result type %s", v.Type())
}

// jsonScalar converts a value inside a map or list as toGo does.
func jsonScalar(v ref.Val) (any, error) {
	if types.IsError(v) {
		return nil, fmt.Errorf("%v", v)
	}
	return toGo(v)
}

// PostgreSQL type OIDs used to adapt values to the parameter types.
const (
	oidText    = 25
	oidVarchar = 1043
	oidBpchar  = 1042
	oidName    = 19
	oidJSON    = 114
	oidJSONB   = 3802
)

// adapt converts an evaluated value for a parameter of the given type.
func adapt(oid uint32, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch oid {
	case oidJSON, oidJSONB:
		if j, ok := v.(jsonText); ok {
			return string(j), nil
		}
		var x any = v
		switch t := v.(type) {
		case time.Time:
			x = t.UTC().Format(time.RFC3339Nano)
		case time.Duration:
			x = t.String()
		}
		b, err := json.Marshal(x)
		if err != nil {
			return nil, err
		}
		return string(b), nil
	case oidText, oidVarchar, oidBpchar, oidName:
		switch t := v.(type) {
		case string:
			return t, nil
		case jsonText:
			return string(t), nil
		case int64:
			return strconv.FormatInt(t, 10), nil
		case uint64:
			return strconv.FormatUint(t, 10), nil
		case float64:
			return strconv.FormatFloat(t, 'g', -1, 64), nil
		case bool:
			return strconv.FormatBool(t), nil
		case time.Time:
			return t.UTC().Format(time.RFC3339Nano), nil
		case time.Duration:
			return t.String(), nil
		}
		return v, nil
	}
	if j, ok := v.(jsonText); ok {
		return string(j), nil
	}
	return v, nil
}
