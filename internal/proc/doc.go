// Package proc starts and stops the local service processes that `causet
// dev` (package devstack) and the test harness (internal/testenv) run: a
// throwaway PostgreSQL cluster (initdb + pg_ctl in a temp dir; when running
// as root, as the postgres user, or nobody where there is none) and a
// Temporal dev server (`temporal server start-dev`), both on free 127.0.0.1
// ports.
//
// PostgreSQL's server binaries are the system's: initdb and pg_ctl on PATH or
// in /usr/lib/postgresql/*/bin. Where there are none, PostgreSQL 15
// ([DownloadedPostgresVersion], the zonky.io build on Maven Central that
// github.com/fergusstrange/embedded-postgres fetches, checked against its
// published SHA-256) is fetched once into os.UserCacheDir()/causet/postgres,
// or /var/cache/causet/postgres for root (whose server user cannot enter
// /root), with one line on stderr; later starts, in any process, reuse it. The
// environment variable CAUSET_POSTGRES_BINARIES ([PostgresBinariesEnv])
// overrides the choice: "download" uses the fetched binaries even when system
// ones exist, "system" never fetches, and a directory path uses the initdb and
// pg_ctl in it.
//
// Each can be halted and resumed on the same port (to simulate an outage) and
// is stopped by its Stop method, which also removes its temp dir. Child
// processes run in their own process group. If this process dies without
// calling Stop (SIGKILL), a small watchdog shell notices and stops what was
// started.
//
// Neighbours: a leaf. Package devstack (`causet dev`) and internal/testenv
// (the tests) start their services with it; internal/proc/proctest checks,
// in tests, what it left behind. Of this module it imports only
// internal/backoff, so any package's tests can use it (through
// internal/testenv) without an import cycle.
package proc
