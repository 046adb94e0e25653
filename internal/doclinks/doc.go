// Package doclinks holds the check, run by go test, that every relative
// link in the repository's markdown resolves: the file it names exists,
// and the heading its #fragment names is in that file (GitHub's anchors).
// Links to the web are not followed. It imports no project package.
package doclinks
