package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
)

const linksHowTo = "needs root and nft (Debian's nftables; scripts/test-tools.sh installs it)"

// SilenceLink makes the TCP connections on local port port go silent, as a
// link does when a firewall or a partition drops its packets: every packet
// to or from the port is dropped on arrival, with no reset and no error to
// either end. It lasts until heal is called or the test ends. Without root
// or nft the test skips (fails under CI=true).
func SilenceLink(t testing.TB, port int) (heal func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		unavailable(t, "SilenceLink %s: not root", linksHowTo)
	}
	if _, err := exec.LookPath("nft"); err != nil {
		unavailable(t, "SilenceLink %s: nft not on PATH", linksHowTo)
	}
	table := fmt.Sprintf("causet_silence_%d_%d", os.Getpid(), port)
	ruleset := fmt.Sprintf(`table inet %s {
	chain in {
		type filter hook input priority -10; policy accept;
		tcp sport %d drop
		tcp dport %d drop
	}
}
`, table, port, port)
	if out, err := run(ruleset, "nft", "-f", "-"); err != nil {
		t.Fatalf("testenv: nft: %v: %s", err, out)
	}
	var once sync.Once
	heal = func() {
		once.Do(func() {
			if out, err := run("", "nft", "delete", "table", "inet", table); err != nil {
				t.Errorf("testenv: heal the link on port %d: %v: %s", port, err, out)
			}
		})
	}
	t.Cleanup(heal)
	return heal
}
