package deployments

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/contract"
	"github.com/causet/projection-retry/internal/testenv"
)

// allowedEnv reports whether a causet process reads name: one of
// app.Variables() (config.Variables() and those of the runtime, the relay and
// Temporal's envconfig, taken from the code) or of a family read by prefix.
func allowedEnv(name string) bool {
	return testenv.Listed(name, app.Variables(), app.VariablePrefixes)
}

// searchAttributes are CONTRACT §6's custom search attributes (Keyword).
var searchAttributes = contract.SearchAttributeNames

// oneShots run to completion; they need no healthcheck.
var oneShots = []string{"kafka-init", "init"}

// causetService is a service built from the repo's Dockerfile that runs
// `causet <name>`: the variable of the address its /readyz listens on, whether
// it uses Kafka and Temporal, the services it must wait for, and the
// variable of a second address it serves on (the runtime's API), if any.
type causetService struct {
	listen          string
	kafka, temporal bool
	dependsOn       []string
	api             string
}

var causetServices = map[string]causetService{
	"bridge":  {"CAUSET_METRICS_ADDR", true, true, []string{"postgres", "kafka", "temporal", "kafka-init", "init"}, ""},
	"worker":  {"CAUSET_METRICS_ADDR", true, true, []string{"postgres", "kafka", "temporal", "kafka-init", "init"}, ""},
	"relay":   {"CAUSET_METRICS_ADDR", true, false, []string{"postgres", "kafka", "kafka-init", "runtime"}, ""},
	"runtime": {"CAUSET_METRICS_ADDR", false, false, []string{"postgres", "init"}, "CAUSET_RUNTIME_ADDR"},
}

type composeFile struct {
	Version  *string             `yaml:"version"`
	Services map[string]*service `yaml:"services"`
	Volumes  map[string]any      `yaml:"volumes"`
}

type service struct {
	Image       string         `yaml:"image"`
	Build       *build         `yaml:"build"`
	Command     stringOrList   `yaml:"command"`
	Entrypoint  stringOrList   `yaml:"entrypoint"`
	Environment map[string]any `yaml:"environment"`
	Ports       []string       `yaml:"ports"`
	Volumes     []string       `yaml:"volumes"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test    []string `yaml:"test"`
		Disable bool     `yaml:"disable"`
	} `yaml:"healthcheck"`
	Restart string `yaml:"restart"`
}

type build struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
	Target     string `yaml:"target"`
}

// stringOrList is a Compose command/entrypoint: a string or a list.
type stringOrList []string

func (s *stringOrList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*s = strings.Fields(n.Value)
		return nil
	}
	var l []string
	if err := n.Decode(&l); err != nil {
		return err
	}
	*s = l
	return nil
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "go.mod"), "tests run from deployments/; the repo root is its parent")
	return root
}

func loadCompose(t *testing.T) *composeFile { return loadComposeFile(t, "docker-compose.yml") }

// loadComposeFile parses the compose file name at the repository's root.
func loadComposeFile(t *testing.T, name string) *composeFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), name))
	require.NoError(t, err)
	var c composeFile
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	require.NoError(t, dec.Decode(&c), "%s does not parse", name)
	require.NotEmpty(t, c.Services, "%s has no services", name)
	return &c
}

// env returns a service's environment with every value as a string.
func env(t *testing.T, s *service, name string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range s.Environment {
		switch v := v.(type) {
		case string:
			out[k] = v
		case int, bool, float64:
			out[k] = fmt.Sprint(v)
		case nil:
			out[k] = ""
		default:
			t.Fatalf("service %s: environment %s has a non-scalar value %v", name, k, v)
		}
	}
	return out
}

func TestComposeStructure(t *testing.T) {
	c := loadCompose(t)
	root := repoRoot(t)
	require.Nil(t, c.Version, "the Compose spec has no top-level version key; remove it")

	for _, want := range []string{"postgres", "kafka", "temporal", "kafka-init", "init", "bridge", "worker", "runtime", "relay"} {
		require.Contains(t, c.Services, want, "service %s is missing", want)
	}

	for name, s := range c.Services {
		require.NotNil(t, s, "service %s is empty", name)
		require.True(t, s.Image != "" || s.Build != nil, "service %s has neither image nor build", name)

		if s.Build != nil {
			ctx := s.Build.Context
			if ctx == "" {
				ctx = "."
			}
			df := s.Build.Dockerfile
			if df == "" {
				df = "Dockerfile"
			}
			dfPath := filepath.Join(root, ctx, df)
			require.FileExists(t, dfPath, "service %s: build dockerfile", name)
			if s.Build.Target != "" {
				require.Contains(t, dockerfileStages(t, dfPath), s.Build.Target,
					"service %s: build target %q is not a stage of %s", name, s.Build.Target, df)
			}
		}

		for dep, d := range s.DependsOn {
			require.Contains(t, c.Services, dep, "service %s depends on unknown service %s", name, dep)
			target := c.Services[dep]
			switch d.Condition {
			case "service_healthy":
				require.True(t, target.Healthcheck != nil && !target.Healthcheck.Disable,
					"service %s waits for %s to be healthy, but %s has no healthcheck", name, dep, dep)
			case "service_completed_successfully":
				require.Contains(t, oneShots, dep, "service %s waits for %s to complete, but %s is not a one-shot", name, dep, dep)
			case "service_started", "":
			default:
				t.Fatalf("service %s: depends_on %s has unknown condition %q", name, dep, d.Condition)
			}
		}

		if slices.Contains(oneShots, name) {
			require.True(t, s.Restart == "no" || s.Restart == "", "one-shot %s must not restart (restart: %q)", name, s.Restart)
			continue
		}
		require.NotNil(t, s.Healthcheck, "service %s has no healthcheck; `docker compose up --wait` cannot tell when it is ready (one-shots: %v)", name, oneShots)
		require.False(t, s.Healthcheck.Disable, "service %s disables its healthcheck", name)
		require.NotEmpty(t, s.Healthcheck.Test, "service %s: healthcheck without test", name)
		require.Contains(t, []string{"CMD", "CMD-SHELL"}, s.Healthcheck.Test[0], "service %s: healthcheck test must start with CMD or CMD-SHELL", name)
	}

	// Named volumes used by services are declared.
	for name, s := range c.Services {
		for _, v := range s.Volumes {
			src, _, ok := strings.Cut(v, ":")
			if ok && !strings.HasPrefix(src, ".") && !strings.HasPrefix(src, "/") && !strings.HasPrefix(src, "~") {
				require.Contains(t, c.Volumes, src, "service %s uses volume %s, which is not declared under volumes:", name, src)
			}
		}
	}
}

func TestComposePortsDoNotCollide(t *testing.T) {
	c := loadCompose(t)
	seen := map[string]string{}
	for name, s := range c.Services {
		for _, p := range s.Ports {
			hostIP, hostPort, containerPort := parsePort(t, name, p)
			require.NotEmpty(t, hostPort, "service %s: port %q publishes no fixed host port", name, p)
			_, err := strconv.Atoi(containerPort)
			require.NoError(t, err, "service %s: port %q: container port", name, p)
			for _, ip := range []string{hostIP, "0.0.0.0"} {
				if other, ok := seen[ip+":"+hostPort]; ok {
					t.Fatalf("host port %s is published by both %s and %s", hostPort, other, name)
				}
			}
			if hostIP == "0.0.0.0" {
				for k, other := range seen {
					if strings.HasSuffix(k, ":"+hostPort) {
						t.Fatalf("host port %s is published by both %s and %s", hostPort, other, name)
					}
				}
			}
			seen[hostIP+":"+hostPort] = name
		}
	}
}

// parsePort splits "[ip:]host:container[/proto]".
func parsePort(t *testing.T, svc, p string) (hostIP, hostPort, containerPort string) {
	t.Helper()
	p, _, _ = strings.Cut(p, "/")
	parts := strings.Split(p, ":")
	switch len(parts) {
	case 2:
		return "0.0.0.0", parts[0], parts[1]
	case 3:
		require.NotNil(t, net.ParseIP(parts[0]), "service %s: port %q: bad host IP", svc, p)
		return parts[0], parts[1], parts[2]
	default:
		t.Fatalf("service %s: port %q: want [ip:]host:container", svc, p)
		return "", "", ""
	}
}

func TestComposeCausetEnvMatchesDesign(t *testing.T) {
	c := loadCompose(t)
	kafka := env(t, c.Services["kafka"], "kafka")
	pg := env(t, c.Services["postgres"], "postgres")
	internalBrokers := kafkaInternalAddrs(t, kafka)

	for name, want := range causetServices {
		s := c.Services[name]
		require.NotNil(t, s.Build, "service %s must be built from the repo's Dockerfile", name)
		require.Equal(t, []string{name}, []string(s.Command), "service %s runs `causet %s`", name, name)
		e := env(t, s, name)
		for k := range e {
			require.True(t, allowedEnv(k), "service %s sets %s, which no causet process reads (typo? app.Variables lists those read)", name, k)
		}

		// KAFKA_BROKERS: every seed is an internal advertised listener of the kafka service.
		if want.kafka {
			require.NotEmpty(t, e["KAFKA_BROKERS"], "service %s: KAFKA_BROKERS is not set (its default 127.0.0.1:9092 is the container itself)", name)
			for _, b := range strings.Split(e["KAFKA_BROKERS"], ",") {
				require.Contains(t, internalBrokers, strings.TrimSpace(b),
					"service %s: KAFKA_BROKERS seed %s is not an advertised listener of the kafka service reachable from containers (%v)", name, b, internalBrokers)
			}
		}

		// TEMPORAL_ADDRESS: the temporal service's frontend port.
		if want.temporal {
			host, port, err := net.SplitHostPort(e["TEMPORAL_ADDRESS"])
			require.NoError(t, err, "service %s: TEMPORAL_ADDRESS=%q", name, e["TEMPORAL_ADDRESS"])
			require.Equal(t, "temporal", host, "service %s: TEMPORAL_ADDRESS must point at the temporal service", name)
			require.Equal(t, temporalFrontendPort(c.Services["temporal"]), port, "service %s: TEMPORAL_ADDRESS port", name)
		}

		// DATABASE_URL: the postgres service, its user, password and database.
		u, err := url.Parse(e["DATABASE_URL"])
		require.NoError(t, err, "service %s: DATABASE_URL", name)
		require.Contains(t, []string{"postgres", "postgresql"}, u.Scheme, "service %s: DATABASE_URL scheme", name)
		require.Equal(t, "postgres", u.Hostname(), "service %s: DATABASE_URL host must be the postgres service", name)
		require.Contains(t, []string{"", "5432"}, u.Port(), "service %s: DATABASE_URL port", name)
		require.Equal(t, pg["POSTGRES_USER"], u.User.Username(), "service %s: DATABASE_URL user vs POSTGRES_USER", name)
		pw, _ := u.User.Password()
		require.Equal(t, pg["POSTGRES_PASSWORD"], pw, "service %s: DATABASE_URL password vs POSTGRES_PASSWORD", name)
		require.Equal(t, pg["POSTGRES_DB"], strings.TrimPrefix(u.Path, "/"), "service %s: DATABASE_URL database vs POSTGRES_DB", name)

		// Its HTTP address (metrics, or the runtime's) must listen beyond
		// loopback in a container, and the healthcheck must ask its /readyz.
		addr := e[want.listen]
		require.NotEmpty(t, addr, "service %s: set %s (the default listens on 127.0.0.1, unreachable from outside the container)", name, want.listen)
		host, port, err := net.SplitHostPort(addr)
		require.NoError(t, err, "service %s: %s", name, want.listen)
		require.Contains(t, []string{"0.0.0.0", "", "::"}, host, "service %s: %s must listen on all interfaces", name, want.listen)
		require.Contains(t, strings.Join(s.Healthcheck.Test, " "), "127.0.0.1:"+port+"/readyz",
			"service %s: healthcheck must ask /readyz on %s's port %s", name, want.listen, port)
		listening := []string{port}
		if want.api != "" {
			_, apiPort, err := net.SplitHostPort(fmt.Sprint(e[want.api]))
			require.NoError(t, err, "service %s: %s", name, want.api)
			listening = append(listening, apiPort)
		}
		for _, p := range s.Ports {
			_, _, cport := parsePort(t, name, p)
			require.Contains(t, listening, cport, "service %s publishes container port %s, which it does not listen on", name, cport)
		}

		// All share one set of topics and task queue with the defaults of §3.
		for k, def := range map[string]string{
			"CAUSET_EVENTS_TOPIC": "causet.events.v1", "CAUSET_DLQ_TOPIC": "causet.projection-dlq.v1",
			"CAUSET_TASK_QUEUE": "causet-projections",
		} {
			if v, ok := e[k]; ok {
				require.Equal(t, def, v, "service %s: %s (kafka-init creates the default topics)", name, k)
			}
		}

		for _, dep := range want.dependsOn {
			require.Contains(t, s.DependsOn, dep, "service %s must wait for %s", name, dep)
		}
	}
	require.Equal(t, env(t, c.Services["bridge"], "bridge"), env(t, c.Services["worker"], "worker"),
		"bridge and worker must share one configuration (YAML anchor)")
}

// kafkaInternalAddrs returns the advertised listeners of the kafka service
// whose host is the service name (reachable from other containers).
func kafkaInternalAddrs(t *testing.T, kafka map[string]string) []string {
	t.Helper()
	for _, k := range []string{"KAFKA_NODE_ID", "KAFKA_PROCESS_ROLES", "KAFKA_LISTENERS", "KAFKA_ADVERTISED_LISTENERS",
		"KAFKA_CONTROLLER_QUORUM_VOTERS", "KAFKA_CONTROLLER_LISTENER_NAMES", "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP",
		"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "CLUSTER_ID"} {
		require.NotEmpty(t, kafka[k], "kafka service: %s is not set (single-node KRaft needs it)", k)
	}
	require.Equal(t, "broker,controller", kafka["KAFKA_PROCESS_ROLES"], "kafka service: single node is broker and controller")
	require.Equal(t, "1", kafka["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"], "kafka service: one broker cannot replicate offsets")

	listeners := map[string]string{} // name -> port
	for _, l := range strings.Split(kafka["KAFKA_LISTENERS"], ",") {
		n, hp, ok := strings.Cut(strings.TrimSpace(l), "://")
		require.True(t, ok, "kafka service: KAFKA_LISTENERS entry %q", l)
		_, port, err := net.SplitHostPort(hp)
		require.NoError(t, err, "kafka service: KAFKA_LISTENERS entry %q", l)
		listeners[n] = port
	}
	var internal []string
	for _, l := range strings.Split(kafka["KAFKA_ADVERTISED_LISTENERS"], ",") {
		n, hp, ok := strings.Cut(strings.TrimSpace(l), "://")
		require.True(t, ok, "kafka service: KAFKA_ADVERTISED_LISTENERS entry %q", l)
		host, port, err := net.SplitHostPort(hp)
		require.NoError(t, err, "kafka service: KAFKA_ADVERTISED_LISTENERS entry %q", l)
		require.Equal(t, listeners[n], port, "kafka service: advertised listener %s port %s differs from KAFKA_LISTENERS (%s)", n, port, listeners[n])
		if host == "kafka" {
			internal = append(internal, hp)
		}
	}
	require.NotEmpty(t, internal, "kafka service advertises no listener on host kafka for other containers")
	return internal
}

// temporalFrontendPort is the --port of the temporal service (default 7233).
func temporalFrontendPort(s *service) string {
	for i, a := range s.Command {
		if (a == "--port" || a == "-p") && i+1 < len(s.Command) {
			return s.Command[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--port="); ok {
			return v
		}
	}
	return "7233"
}

func TestComposeTemporalAndTopics(t *testing.T) {
	c := loadCompose(t)
	tmp := c.Services["temporal"]
	cmd := strings.Join(tmp.Command, " ")
	require.Contains(t, cmd, "start-dev", "temporal service runs the dev server")
	require.Contains(t, cmd, "--ip 0.0.0.0", "temporal dev server must listen beyond loopback in its container")
	require.Contains(t, cmd, "--ui-port", "temporal service must serve the Web UI")
	for _, sa := range searchAttributes {
		require.Contains(t, cmd, "--search-attribute "+sa+"=Keyword", "temporal service: search attribute %s", sa)
	}
	require.Contains(t, strings.Join(tmp.Healthcheck.Test, " "), "operator cluster health", "temporal healthcheck")

	// kafka-init creates both topics of §3, the events topic with 3 partitions.
	script := strings.Join(c.Services["kafka-init"].Command, " ")
	for _, topic := range []string{"causet.events.v1", "causet.projection-dlq.v1"} {
		require.Regexp(t, regexp.MustCompile(`--create --if-not-exists --topic `+regexp.QuoteMeta(topic)+`\b`), script, "kafka-init must create %s idempotently", topic)
	}
	require.Regexp(t, `--topic causet\.events\.v1 --partitions 3\b`, script, "events topic has 3 partitions")
	internal := kafkaInternalAddrs(t, env(t, c.Services["kafka"], "kafka"))
	require.Contains(t, script, "--bootstrap-server "+internal[0], "kafka-init must use the internal listener")

	// init deploys to the same database as bridge and worker.
	initEnv := env(t, c.Services["init"], "init")
	require.Equal(t, env(t, c.Services["worker"], "worker")["DATABASE_URL"], initEnv["DATABASE_URL"], "init and worker must use one DATABASE_URL")
}

// dockerfileStages returns the stage names (FROM … AS name) of a Dockerfile.
func dockerfileStages(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var stages []string
	re := regexp.MustCompile(`(?im)^FROM\s+\S+\s+AS\s+(\S+)\s*$`)
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		stages = append(stages, strings.ToLower(m[1]))
	}
	return stages
}

func TestDockerfile(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	require.NoError(t, err)
	df := string(b)

	require.Regexp(t, `(?m)^FROM golang:1\.26\S*\s+AS\s+\w+`, df, "builder stage on golang:1.26")
	m := regexp.MustCompile(`(?m)go build[^\n]*\s(\./\S+)\s*$`).FindStringSubmatch(df)
	require.NotNil(t, m, "Dockerfile has no `go build … ./path` line")
	require.DirExists(t, filepath.Join(root, filepath.FromSlash(m[1])), "Dockerfile builds %s, which does not exist", m[1])
	require.FileExists(t, filepath.Join(root, filepath.FromSlash(m[1]), "main.go"))
	require.Contains(t, df, "CGO_ENABLED=0", "static binary")

	// Every COPY source from the build context exists.
	for _, line := range regexp.MustCompile(`(?m)^COPY\s+(.+)$`).FindAllStringSubmatch(df, -1) {
		fields := strings.Fields(line[1])
		if strings.HasPrefix(fields[0], "--from=") {
			continue
		}
		for _, src := range fields[:len(fields)-1] {
			if strings.HasPrefix(src, "--") {
				continue
			}
			matches, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(src)))
			require.NoError(t, err)
			require.NotEmpty(t, matches, "Dockerfile copies %s, which does not exist", src)
		}
	}

	// The init script the init stage copies is a POSIX sh script.
	script, err := os.ReadFile(filepath.Join(root, "deployments", "init.sh"))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(script), "#!/bin/sh\n"), "init.sh runs under alpine's /bin/sh")
	first := regexp.MustCompile(`(?m)^[^#\n]*\bcauset [a-z]+( [a-z]+)?`).FindString(string(script))
	require.Equal(t, "causet migrate up", strings.TrimSpace(first), "init.sh migrates the schema before anything else uses the database")

	// .dockerignore must not hide what the build needs.
	ign, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	require.NoError(t, err)
	for _, l := range strings.Split(string(ign), "\n") {
		l = strings.TrimPrefix(strings.TrimSpace(l), "/")
		for _, needed := range []string{"go.mod", "go.sum", "cmd", "examples", "deployments", "Dockerfile"} {
			require.NotEqual(t, needed, l, ".dockerignore excludes %s, which the image build needs", needed)
		}
	}
}

// TestImageTags: every image the compose file and the Dockerfile pull is
// pinned to a release tag (not latest, not untagged), and README.md's
// "Image tags" table lists exactly those, so a bumped tag is re-checked and
// documented with it.
func TestImageTags(t *testing.T) {
	root := repoRoot(t)
	used := map[string]bool{}
	services := maps.Clone(loadCompose(t).Services)
	for name, svc := range loadComposeFile(t, "docker-compose.cluster.yml").Services {
		services["cluster "+name] = svc
	}
	for name, svc := range services {
		if svc.Image == "" {
			continue
		}
		img := svc.Image
		// ${VAR:-default}: the default is what runs.
		if m := regexp.MustCompile(`^\$\{\w+:-(.+)\}$`).FindStringSubmatch(img); m != nil {
			img = m[1]
		}
		require.NotContains(t, img, "$", "service %s: image %q", name, svc.Image)
		used[img] = true
	}
	df, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	require.NoError(t, err)
	stages := dockerfileStages(t, filepath.Join(root, "Dockerfile"))
	for _, m := range regexp.MustCompile(`(?im)^FROM\s+(\S+)`).FindAllStringSubmatch(string(df), -1) {
		if !slices.Contains(stages, strings.ToLower(m[1])) {
			used[m[1]] = true
		}
	}
	require.NotEmpty(t, used)
	for img := range used {
		i := strings.LastIndex(img, ":")
		require.Positive(t, i, "image %s has no tag", img)
		tag := img[i+1:]
		require.NotEqual(t, "latest", tag, "image %s", img)
		// A release, or the admin-tools' release of each tool it bundles.
		require.Regexp(t, `^v?\d+(\.\d+)*(-[a-z]+-\d+(\.\d+)*)*$`, tag, "image %s is not pinned to a release", img)
	}

	readme, err := os.ReadFile(filepath.Join(root, "deployments", "README.md"))
	require.NoError(t, err)
	_, table, ok := strings.Cut(string(readme), "### Image tags")
	require.True(t, ok, "deployments/README.md has no \"Image tags\" section")
	table, _, _ = strings.Cut(table, "\n#")
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\|").FindAllStringSubmatch(table, -1) {
		listed[m[1]] = true
	}
	require.Equal(t, used, listed, "deployments/README.md's image table and the images the files pull")
}
