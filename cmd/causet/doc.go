// Command causet runs Causet's projection worker on Temporal and its tooling:
// dev (the whole stack on embedded defaults), bridge and worker (the two
// processes of a deployment), projections, dlq, produce and bench. Every
// command assembles the service through internal/app.
package main
