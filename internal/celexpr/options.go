package celexpr

// DefaultCostLimit is the CEL cost one evaluation of one expression may
// spend unless configured otherwise (projection.DefaultCostLimit).
const DefaultCostLimit uint64 = 1_000_000

// InterruptCheckFrequency is how many comprehension iterations run between
// checks of the evaluation's context: a fraction of a millisecond.
const InterruptCheckFrequency = 100

// Options are the validation and evaluation options of a document's
// expressions.
type Options struct {
	// CostLimit is the CEL cost one evaluation of one expression may spend
	// and the bound its worst-case estimate must stay under.
	CostLimit uint64
	// RuntimeOnly skips the cost estimate: a deployed document was checked
	// when it was deployed (perhaps under another limit, or before there
	// was one), and the limit still bounds every evaluation.
	RuntimeOnly bool
}

// NewOptions applies opts (nil ones are skipped); a CostLimit of 0 becomes
// DefaultCostLimit.
func NewOptions[O ~func(*Options)](opts []O) Options {
	var o Options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.CostLimit == 0 {
		o.CostLimit = DefaultCostLimit
	}
	return o
}
