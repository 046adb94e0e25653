// Package config reads the service's environment with validation and
// defaults. A bad value stops the program with one line naming the variable,
// the value and what is allowed; nothing silently falls back to a default.
package config
