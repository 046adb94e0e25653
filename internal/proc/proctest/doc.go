// Package proctest has helpers for the tests of devstack and internal/proc
// that check which processes and temp dirs are left behind: Alive,
// Mentioning (the processes whose command line names a string) and
// TempRoot.
//
// Neighbours: a leaf used only by tests (devstack's and internal/proc's);
// it imports no project package.
package proctest
