package deployments

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/internal/testenv"
)

// pinnedVersions reads deployments/versions.env.
func pinnedVersions(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot(t), "deployments", "versions.env"))
	require.NoError(t, err)
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		require.True(t, ok, "versions.env: %q is not KEY=value", line)
		require.Regexp(t, `^[A-Z_]+$`, k)
		require.NotContains(t, v, " ", "versions.env: %s: make, sh and compose read it as is", k)
		out[k] = v
	}
	require.NoError(t, sc.Err())
	return out
}

// Every stack here runs the versions of deployments/versions.env: the
// compose files' images, the dev server the tests start, and the native
// stack's scripts, which read the file.
func TestEveryStackRunsThePinnedVersions(t *testing.T) {
	v := pinnedVersions(t)
	for _, k := range []string{"TEMPORAL_CLI_VERSION", "TEMPORAL_SERVER_VERSION", "TEMPORAL_ADMIN_TOOLS_VERSION",
		"TEMPORAL_UI_VERSION", "KAFKA_VERSION", "POSTGRES_VERSION"} {
		require.NotEmpty(t, v[k], "versions.env has no %s", k)
	}
	require.True(t, strings.HasPrefix(v["TEMPORAL_ADMIN_TOOLS_VERSION"], v["TEMPORAL_SERVER_VERSION"]+"-"),
		"the admin-tools image is the server release's")

	image := func(c *composeFile, svc string) string {
		s := c.Services[svc]
		require.NotNil(t, s, "service %s", svc)
		img := s.Image
		if m := regexp.MustCompile(`^\$\{\w+:-(.+)\}$`).FindStringSubmatch(img); m != nil {
			img = m[1]
		}
		return img
	}
	dev := loadCompose(t)
	require.Equal(t, "postgres:"+v["POSTGRES_VERSION"], image(dev, "postgres"))
	require.Equal(t, "apache/kafka:"+v["KAFKA_VERSION"], image(dev, "kafka"))
	require.Equal(t, "apache/kafka:"+v["KAFKA_VERSION"], image(dev, "kafka-init"))
	require.Equal(t, "temporalio/temporal:"+v["TEMPORAL_CLI_VERSION"], image(dev, "temporal"))
	cluster := loadComposeFile(t, "docker-compose.cluster.yml")
	require.Equal(t, "temporalio/server:"+v["TEMPORAL_SERVER_VERSION"], image(cluster, "temporal"))
	require.Equal(t, "temporalio/admin-tools:"+v["TEMPORAL_ADMIN_TOOLS_VERSION"], image(cluster, "temporal-schema"))
	require.Equal(t, "temporalio/admin-tools:"+v["TEMPORAL_ADMIN_TOOLS_VERSION"], image(cluster, "temporal-namespace"))
	require.Equal(t, "temporalio/ui:"+v["TEMPORAL_UI_VERSION"], image(cluster, "temporal-ui"))

	require.Equal(t, "v"+v["TEMPORAL_CLI_VERSION"], testenv.TemporalCLIVersion, "the CLI the tests build and start")

	read := func(path string) string {
		b, err := os.ReadFile(filepath.Join(repoRoot(t), path))
		require.NoError(t, err)
		return string(b)
	}
	require.Contains(t, read("Makefile"), "include deployments/versions.env", "make tools installs the pinned CLI")
	for _, script := range []string{"scripts/temporal-cluster.sh", "scripts/kafka-broker.sh"} {
		require.Contains(t, read(script), "deployments/versions.env", "%s takes its default version from versions.env", script)
	}
	// The setup steps of every stack are one script's.
	for _, path := range []string{"scripts/temporal-cluster.sh", "docker-compose.cluster.yml"} {
		require.Contains(t, read(path), "deployments/temporal-setup.sh", path)
	}
	// What the docs say is what runs.
	require.Contains(t, read("deployments/README.md"), "go.temporal.io/server/cmd/server@v"+v["TEMPORAL_SERVER_VERSION"])
	require.Contains(t, read("README.md"), "`temporal` CLI (v"+v["TEMPORAL_CLI_VERSION"]+")")
}
