package intentapi

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/causet/projection-retry/config"
)

// DefaultAddr is CAUSET_RUNTIME_ADDR's default.
const DefaultAddr = "127.0.0.1:8080"

// AddrFromEnv reads CAUSET_RUNTIME_ADDR, the address the server listens on
// (default DefaultAddr); a bad value gives the one-line error of package
// config: variable, value and rule.
func AddrFromEnv(lookup config.Lookup) (string, error) {
	const key = "CAUSET_RUNTIME_ADDR"
	v, ok := lookup(key)
	if !ok {
		return DefaultAddr, nil
	}
	v = strings.TrimSpace(v)
	_, port, err := net.SplitHostPort(v)
	if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("%s=%q is invalid: want host:port, such as %s", key, v, DefaultAddr)
	}
	return v, nil
}
