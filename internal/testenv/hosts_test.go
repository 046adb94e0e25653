package testenv

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// greeter serves "hello <name>\n" to every connection on loopback.
func greeter(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "hello %s\n", name)
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// dialFrom reads one line from ServiceIP:port on host h within 3 s.
func dialFrom(h *Host, port int) (string, error) {
	out, err := h.Command("timeout", "3", "bash", "-c",
		fmt.Sprintf("exec 3<>/dev/tcp/%s/%d && head -n1 <&3", ServiceIP, port)).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func TestNetworkCutsOneServiceLinkAndHeals(t *testing.T) {
	n := NewNetwork(t)
	h := n.Host("client")
	a, b := n.Forward(greeter(t, "a")), n.Forward(greeter(t, "b"))

	got, err := dialFrom(h, a)
	require.NoError(t, err, got)
	require.Equal(t, "hello a", got)

	heal := h.Cut(a, Both)
	_, err = dialFrom(h, a)
	require.Error(t, err, "a cut link neither connects nor refuses: the attempt times out")
	got, err = dialFrom(h, b)
	require.NoError(t, err, "the other service's link still works: %s", got)
	require.Equal(t, "hello b", got)

	heal()
	got, err = dialFrom(h, a)
	require.NoError(t, err, got)
	require.Equal(t, "hello a", got)

	heal = h.Cut(a, In)
	_, err = dialFrom(h, a)
	require.Error(t, err, "replies dropped: no connection either")
	heal()
}
