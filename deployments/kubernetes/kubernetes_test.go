package kubernetes_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/causet/projection-retry/app"
	"github.com/causet/projection-retry/config"
	"github.com/causet/projection-retry/intentapi"
	"github.com/causet/projection-retry/internal/health"
	"github.com/causet/projection-retry/internal/testenv"
	"github.com/causet/projection-retry/relay"
)

// partitionsAnnotation records, on the bridge Deployment, how many
// partitions the events topic has; replicas must not exceed it.
const partitionsAnnotation = "causet/events-topic-partitions"

// processes are the commands the manifests run, with the variable of the
// address their probes must reach.
var processes = map[string]string{
	"bridge":  "CAUSET_METRICS_ADDR",
	"worker":  "CAUSET_METRICS_ADDR",
	"relay":   "CAUSET_METRICS_ADDR",
	"runtime": "CAUSET_METRICS_ADDR",
}

// rendered is one kustomization's output, decoded.
type rendered struct {
	dir         string
	deployments map[string]*appsv1.Deployment
	pdbs        map[string]*policyv1.PodDisruptionBudget
	hpas        map[string]*autoscalingv2.HorizontalPodAutoscaler
	configMaps  map[string]*corev1.ConfigMap
	services    map[string]*corev1.Service
	secrets     map[string]*corev1.Secret
	policies    map[string]*networkingv1.NetworkPolicy
}

// kinds is what the manifests may hold: apiVersion/kind to a new value of
// its type.
var kinds = map[string]func() any{
	"apps/v1/Deployment":                     func() any { return new(appsv1.Deployment) },
	"policy/v1/PodDisruptionBudget":          func() any { return new(policyv1.PodDisruptionBudget) },
	"autoscaling/v2/HorizontalPodAutoscaler": func() any { return new(autoscalingv2.HorizontalPodAutoscaler) },
	"v1/ConfigMap":                           func() any { return new(corev1.ConfigMap) },
	"v1/Service":                             func() any { return new(corev1.Service) },
	"v1/Secret":                              func() any { return new(corev1.Secret) },
	"networking.k8s.io/v1/NetworkPolicy":     func() any { return new(networkingv1.NetworkPolicy) },
}

// kustomizations are the base and every overlay.
func kustomizations(t *testing.T) []string {
	t.Helper()
	overlays, err := filepath.Glob("overlays/*")
	require.NoError(t, err)
	require.Contains(t, overlays, filepath.Join("overlays", "dev"))
	require.Contains(t, overlays, filepath.Join("overlays", "production"))
	return append([]string{"base"}, overlays...)
}

// render runs kustomize on dir and decodes every object strictly: an
// unknown field, or a kind the manifests should not hold, fails the test.
func render(t *testing.T, dir string) *rendered {
	t.Helper()
	abs, err := filepath.Abs(dir)
	require.NoError(t, err)
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), abs)
	require.NoError(t, err, "kustomize %s", dir)
	out := &rendered{dir: dir,
		deployments: map[string]*appsv1.Deployment{}, pdbs: map[string]*policyv1.PodDisruptionBudget{},
		hpas: map[string]*autoscalingv2.HorizontalPodAutoscaler{}, configMaps: map[string]*corev1.ConfigMap{},
		services: map[string]*corev1.Service{}, secrets: map[string]*corev1.Secret{},
		policies: map[string]*networkingv1.NetworkPolicy{}}
	for _, r := range m.Resources() {
		b, err := r.MarshalJSON()
		require.NoError(t, err)
		var head struct{ APIVersion, Kind string }
		require.NoError(t, json.Unmarshal(b, &head))
		key := head.APIVersion + "/" + head.Kind
		newObj, ok := kinds[key]
		require.True(t, ok, "%s: %s %s: not a kind the manifests should hold", dir, key, r.GetName())
		obj := newObj()
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(obj), "%s: %s %s does not decode strictly", dir, key, r.GetName())
		name := r.GetName()
		switch o := obj.(type) {
		case *appsv1.Deployment:
			out.deployments[name] = o
		case *policyv1.PodDisruptionBudget:
			out.pdbs[name] = o
		case *autoscalingv2.HorizontalPodAutoscaler:
			out.hpas[name] = o
		case *corev1.ConfigMap:
			out.configMaps[name] = o
		case *corev1.Service:
			out.services[name] = o
		case *corev1.Secret:
			out.secrets[name] = o
		case *networkingv1.NetworkPolicy:
			out.policies[name] = o
		}
	}
	return out
}

func renderAll(t *testing.T) []*rendered {
	t.Helper()
	var out []*rendered
	for _, dir := range kustomizations(t) {
		out = append(out, render(t, dir))
	}
	return out
}

// allowedEnv reports whether a causet process reads name (app.Variables:
// config.Variables() and the runtime's, the relay's and Temporal's).
func allowedEnv(name string) bool {
	return testenv.Listed(name, app.Variables(), app.VariablePrefixes)
}

// process is the causet command a Deployment runs.
func process(t *testing.T, d *appsv1.Deployment) (string, corev1.Container) {
	t.Helper()
	cs := d.Spec.Template.Spec.Containers
	require.Len(t, cs, 1, "Deployment %s: one container", d.Name)
	for _, ic := range d.Spec.Template.Spec.InitContainers {
		require.Equal(t, "migrate", ic.Name, "Deployment %s: the one init container is causet migrate up", d.Name)
	}
	c := cs[0]
	require.Empty(t, c.Command, "Deployment %s: the image's entrypoint is the causet binary", d.Name)
	require.NotEmpty(t, c.Args, "Deployment %s: args name the command", d.Name)
	_, ok := processes[c.Args[0]]
	require.True(t, ok, "Deployment %s runs `causet %s`, not a long-running process", d.Name, c.Args[0])
	require.Equal(t, "causet-"+c.Args[0], d.Name)
	return c.Args[0], c
}

// environment is a container's effective environment: its ConfigMaps, then
// its env (literal values, and "<secret>" for a secret's).
func (r *rendered) environment(t *testing.T, d *appsv1.Deployment, c corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, ef := range c.EnvFrom {
		require.Nil(t, ef.SecretRef, "Deployment %s: secrets are referenced key by key (env), so their names are checked", d.Name)
		require.NotNil(t, ef.ConfigMapRef, "Deployment %s: envFrom", d.Name)
		require.Empty(t, ef.Prefix, "Deployment %s: envFrom prefix", d.Name)
		cm, ok := r.configMaps[ef.ConfigMapRef.Name]
		require.True(t, ok, "%s: Deployment %s uses ConfigMap %s, which is not rendered", r.dir, d.Name, ef.ConfigMapRef.Name)
		for k, v := range cm.Data {
			env[k] = v
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = "<secret>"
		default:
			t.Fatalf("%s: Deployment %s: env %s: only literal values and secrets", r.dir, d.Name, e.Name)
		}
	}
	return env
}

// TestKubernetesRendersStrictly: the base and every overlay render, and
// every object is one of the expected kinds with no unknown field.
func TestKubernetesRendersStrictly(t *testing.T) {
	for _, r := range renderAll(t) {
		require.Len(t, r.deployments, len(processes), "%s: a Deployment per process", r.dir)
		for name := range processes {
			require.Contains(t, r.deployments, "causet-"+name, r.dir)
		}
		require.Len(t, r.configMaps, 1, r.dir)
		require.Contains(t, r.services, "causet-runtime", r.dir)
		require.Contains(t, r.hpas, "causet-worker", r.dir)
		require.Contains(t, r.pdbs, "causet-bridge", r.dir)
	}
}

// TestKubernetesEnvNamesAreRead: every variable the manifests set (env,
// the ConfigMap's keys, the generated secrets' keys) is one the code reads,
// and the values parse as the processes parse them.
func TestKubernetesEnvNamesAreRead(t *testing.T) {
	for _, r := range renderAll(t) {
		for name, cm := range r.configMaps {
			require.NotEmpty(t, cm.Data, "%s: ConfigMap %s", r.dir, name)
			for k := range cm.Data {
				require.True(t, allowedEnv(k), "%s: ConfigMap %s sets %s, which no causet process reads", r.dir, name, k)
			}
		}
		for name, s := range r.secrets {
			if strings.HasPrefix(name, "causet-runtime-tokens") {
				// Mounted as a file (CAUSET_RUNTIME_TOKENS_FILE), not an environment.
				require.Contains(t, s.Data, "tokens", "%s: Secret %s", r.dir, name)
				_, err := intentapi.ParseTokens(string(s.Data["tokens"]), name)
				require.NoError(t, err, "%s: Secret %s", r.dir, name)
				continue
			}
			for k := range s.Data {
				require.True(t, allowedEnv(k), "%s: Secret %s holds %s, which no causet process reads", r.dir, name, k)
			}
		}
		for _, d := range r.deployments {
			proc, c := process(t, d)
			for _, e := range c.Env {
				require.True(t, allowedEnv(e.Name), "%s: Deployment %s sets %s, which no causet process reads", r.dir, d.Name, e.Name)
				if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil {
					require.Equal(t, e.Name, ref.SecretKeyRef.Key, "%s: Deployment %s: a secret's key is the variable's name", r.dir, d.Name)
					if s, ok := r.secrets[ref.SecretKeyRef.Name]; ok {
						require.Contains(t, s.Data, ref.SecretKeyRef.Key, "%s: Deployment %s: secret %s", r.dir, d.Name, ref.SecretKeyRef.Name)
					}
				}
			}
			env := r.environment(t, d, c)
			require.Equal(t, "<secret>", env["DATABASE_URL"], "%s: Deployment %s: DATABASE_URL comes from a secret", r.dir, d.Name)
			for k, v := range env {
				if strings.HasPrefix(k, "KAFKA_SASL_") || k == "TEMPORAL_API_KEY" {
					require.Equal(t, "<secret>", v, "%s: Deployment %s: %s belongs in a secret", r.dir, d.Name, k)
				}
			}

			// The values are accepted as the process reads them (secrets
			// stand in as a valid URL; optional SASL ones as unset).
			lookup := func(k string) (string, bool) {
				v, ok := env[k]
				switch {
				case k == "DATABASE_URL":
					return "postgres://user@db:5432/causet", true
				case v == "<secret>":
					return "", false
				}
				return v, ok
			}
			_, err := config.Load(lookup)
			require.NoError(t, err, "%s: Deployment %s", r.dir, d.Name)
			switch proc {
			case "runtime":
				_, err = intentapi.AddrFromEnv(lookup)
			case "relay":
				_, err = relay.LoadSettings(lookup)
			}
			require.NoError(t, err, "%s: Deployment %s", r.dir, d.Name)
		}
	}
}

// TestKubernetesProbes: liveness asks /healthz, readiness /readyz, both on
// the port the process serves them on (CAUSET_METRICS_ADDR; the runtime's
// CAUSET_RUNTIME_ADDR), which listens on every interface.
func TestKubernetesProbes(t *testing.T) {
	for _, r := range renderAll(t) {
		for _, d := range r.deployments {
			proc, c := process(t, d)
			env := r.environment(t, d, c)
			addrVar := processes[proc]
			host, portStr, err := net.SplitHostPort(env[addrVar])
			require.NoError(t, err, "%s: Deployment %s: %s=%q", r.dir, d.Name, addrVar, env[addrVar])
			require.Contains(t, []string{"0.0.0.0", "", "::"}, host, "%s: Deployment %s: %s must listen beyond loopback", r.dir, d.Name, addrVar)
			port, err := strconv.Atoi(portStr)
			require.NoError(t, err)

			var named string
			for _, p := range c.Ports {
				if int(p.ContainerPort) == port {
					named = p.Name
				}
			}
			require.NotEmpty(t, named, "%s: Deployment %s: no named container port %d (%s)", r.dir, d.Name, port, addrVar)
			probePort := func(what string, pr *corev1.Probe, path string) {
				require.NotNil(t, pr, "%s: Deployment %s: %s probe", r.dir, d.Name, what)
				require.NotNil(t, pr.HTTPGet, "%s: Deployment %s: %s probe is an HTTP GET", r.dir, d.Name, what)
				require.Equal(t, path, pr.HTTPGet.Path, "%s: Deployment %s: %s probe path", r.dir, d.Name, what)
				ok := pr.HTTPGet.Port == intstr.FromString(named) || pr.HTTPGet.Port == intstr.FromInt32(int32(port))
				require.True(t, ok, "%s: Deployment %s: %s probe port %s is not %s (%d)", r.dir, d.Name, what, pr.HTTPGet.Port.String(), named, port)
				if path == "/readyz" {
					// It answers within health.DefaultTimeout; a shorter
					// probe timeout would fail a slow but healthy answer.
					require.GreaterOrEqual(t, pr.TimeoutSeconds, int32(health.DefaultTimeout.Seconds())+1, "%s: Deployment %s: %s probe timeout", r.dir, d.Name, what)
				}
			}
			probePort("liveness", c.LivenessProbe, "/healthz")
			probePort("readiness", c.ReadinessProbe, "/readyz")
			if c.StartupProbe != nil {
				probePort("startup", c.StartupProbe, "/healthz")
			}
		}
	}
}

// dockerfileUser is the numeric uid:gid the runtime image runs as.
func dockerfileUser(t *testing.T) (uid, gid int64) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	require.NoError(t, err)
	_, stage, ok := strings.Cut(string(b), "\nFROM alpine")
	require.True(t, ok, "the Dockerfile's runtime stage")
	stage, _, _ = strings.Cut(stage, "\nFROM ")
	require.Regexp(t, `\sAS runtime\n`, stage)
	m := regexp.MustCompile(`(?m)^USER\s+(\d+):(\d+)\s*$`).FindStringSubmatch(stage)
	require.NotNil(t, m, "the Dockerfile's runtime stage has no numeric USER uid:gid")
	uid, _ = strconv.ParseInt(string(m[1]), 10, 64)
	gid, _ = strconv.ParseInt(string(m[2]), 10, 64)
	require.NotZero(t, uid, "the image must not run as root")
	return uid, gid
}

// TestKubernetesSecurityContext: every process runs as the image's non-root
// user, read-only, without capabilities or privilege escalation, under the
// runtime's default seccomp profile, with requests (the HPA needs CPU's) and
// a memory limit.
func TestKubernetesSecurityContext(t *testing.T) {
	uid, gid := dockerfileUser(t)
	for _, r := range renderAll(t) {
		for _, d := range r.deployments {
			_, c := process(t, d)
			ps := d.Spec.Template.Spec.SecurityContext
			where := fmt.Sprintf("%s: Deployment %s", r.dir, d.Name)
			require.NotNil(t, ps, where)
			require.Equal(t, ptr(true), ps.RunAsNonRoot, where)
			require.Equal(t, ptr(uid), ps.RunAsUser, "%s: runAsUser must be the Dockerfile's USER", where)
			require.Equal(t, ptr(gid), ps.RunAsGroup, "%s: runAsGroup must be the Dockerfile's USER group", where)
			require.NotNil(t, ps.SeccompProfile, where)
			require.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, ps.SeccompProfile.Type, where)
			require.Equal(t, ptr(false), d.Spec.Template.Spec.AutomountServiceAccountToken, "%s: no API access needed", where)

			cs := c.SecurityContext
			require.NotNil(t, cs, where)
			require.Equal(t, ptr(true), cs.RunAsNonRoot, where)
			require.Equal(t, ptr(true), cs.ReadOnlyRootFilesystem, where)
			require.Equal(t, ptr(false), cs.AllowPrivilegeEscalation, where)
			require.Nil(t, cs.Privileged, where)
			require.NotNil(t, cs.Capabilities, where)
			require.Equal(t, []corev1.Capability{"ALL"}, cs.Capabilities.Drop, where)
			require.Empty(t, cs.Capabilities.Add, where)
			if cs.RunAsUser != nil {
				require.Equal(t, uid, *cs.RunAsUser, where)
			}
			// The processes write no files: no volume, not even for /tmp; the
			// runtime reads its tokens from a secret, read-only.
			for _, m := range c.VolumeMounts {
				require.True(t, m.ReadOnly && m.Name == "runtime-tokens", "%s: volume %s", where, m.Name)
			}

			require.False(t, c.Resources.Requests.Cpu().IsZero(), "%s: CPU request", where)
			require.False(t, c.Resources.Requests.Memory().IsZero(), "%s: memory request", where)
			require.False(t, c.Resources.Limits.Memory().IsZero(), "%s: memory limit", where)
			require.GreaterOrEqual(t, c.Resources.Limits.Memory().Cmp(*c.Resources.Requests.Memory()), 0, "%s: limit below request", where)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func selects(sel map[string]string, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// TestKubernetesMigrateFirst: every process starts behind `causet migrate up`,
// run by its own image with the database secret, as locked down as the
// process itself.
func TestKubernetesMigrateFirst(t *testing.T) {
	for _, r := range renderAll(t) {
		for _, d := range r.deployments {
			_, c := process(t, d)
			where := fmt.Sprintf("%s: Deployment %s", r.dir, d.Name)
			ics := d.Spec.Template.Spec.InitContainers
			require.Len(t, ics, 1, where)
			ic := ics[0]
			require.Equal(t, []string{"migrate", "up"}, ic.Args, where)
			require.Empty(t, ic.Command, where)
			require.Equal(t, c.Image, ic.Image, "%s: the migrations are the process's own", where)
			require.Len(t, ic.Env, 1, where)
			require.Equal(t, "DATABASE_URL", ic.Env[0].Name, where)
			require.NotNil(t, ic.Env[0].ValueFrom, where)
			var secret string
			for _, e := range c.Env {
				if e.Name == "DATABASE_URL" {
					secret = e.ValueFrom.SecretKeyRef.Name
				}
			}
			require.Equal(t, secret, ic.Env[0].ValueFrom.SecretKeyRef.Name, "%s: the process's database secret", where)
			require.True(t, strings.HasPrefix(secret, "causet-database"), where)
			require.Equal(t, c.SecurityContext, ic.SecurityContext, "%s: the init container is locked down as the process", where)
			require.False(t, ic.Resources.Limits.Memory().IsZero(), where)
		}
	}
}

// TestKubernetesWorkloads: bridges no more than the documented partitions,
// with a PodDisruptionBudget; the worker autoscaled on CPU; the runtime
// behind a Service on its HTTP port; selectors that match their pods.
func TestKubernetesWorkloads(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	for _, r := range renderAll(t) {
		for _, d := range r.deployments {
			require.NotNil(t, d.Spec.Selector, "%s: Deployment %s", r.dir, d.Name)
			require.Equal(t, d.Spec.Selector.MatchLabels, map[string]string{
				"app.kubernetes.io/name": "causet", "app.kubernetes.io/component": strings.TrimPrefix(d.Name, "causet-"),
			}, "%s: Deployment %s selector", r.dir, d.Name)
			require.True(t, selects(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels), "%s: Deployment %s selects its pods", r.dir, d.Name)
			_, c := process(t, d)
			require.Regexp(t, `(^|/)causet(:[\w.-]+)?$`, c.Image, "%s: Deployment %s image", r.dir, d.Name)
		}

		bridge := r.deployments["causet-bridge"]
		parts, err := strconv.Atoi(bridge.Annotations[partitionsAnnotation])
		require.NoError(t, err, "%s: causet-bridge needs annotation %s (the events topic's partition count)", r.dir, partitionsAnnotation)
		require.Contains(t, string(readme), partitionsAnnotation, "README.md documents the partition annotation")
		require.NotNil(t, bridge.Spec.Replicas, "%s: causet-bridge replicas", r.dir)
		require.LessOrEqual(t, int(*bridge.Spec.Replicas), parts, "%s: more bridges than the events topic's %d partitions would sit idle", r.dir, parts)
		pdb := r.pdbs["causet-bridge"]
		require.True(t, selects(pdb.Spec.Selector.MatchLabels, bridge.Spec.Template.Labels), "%s: the bridge PDB selects the bridge pods", r.dir)
		require.True(t, pdb.Spec.MaxUnavailable != nil || pdb.Spec.MinAvailable != nil, r.dir)
		for name, p := range r.pdbs {
			d, ok := r.deployments[name]
			require.True(t, ok, "%s: PDB %s has no Deployment of its name", r.dir, name)
			require.True(t, selects(p.Spec.Selector.MatchLabels, d.Spec.Template.Labels), "%s: PDB %s selects its Deployment's pods", r.dir, name)
			if p.Spec.MinAvailable != nil && d.Spec.Replicas != nil {
				require.Less(t, p.Spec.MinAvailable.IntValue(), int(*d.Spec.Replicas), "%s: PDB %s would block every drain", r.dir, name)
			}
		}

		worker := r.deployments["causet-worker"]
		require.Nil(t, worker.Spec.Replicas, "%s: the HPA owns the worker's replicas", r.dir)
		hpa := r.hpas["causet-worker"]
		require.Equal(t, autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "causet-worker"}, hpa.Spec.ScaleTargetRef, r.dir)
		require.NotNil(t, hpa.Spec.MinReplicas, r.dir)
		require.GreaterOrEqual(t, *hpa.Spec.MinReplicas, int32(1), r.dir)
		require.GreaterOrEqual(t, hpa.Spec.MaxReplicas, *hpa.Spec.MinReplicas, r.dir)
		require.Len(t, hpa.Spec.Metrics, 1, r.dir)
		require.Equal(t, autoscalingv2.ResourceMetricSourceType, hpa.Spec.Metrics[0].Type, r.dir)
		require.Equal(t, corev1.ResourceCPU, hpa.Spec.Metrics[0].Resource.Name, r.dir)

		svc := r.services["causet-runtime"]
		rt := r.deployments["causet-runtime"]
		require.Equal(t, svc.Spec.Selector, rt.Spec.Selector.MatchLabels, "%s: the Service selects the runtime pods", r.dir)
		require.Len(t, svc.Spec.Ports, 1, r.dir)
		require.Equal(t, intstr.FromString("http"), svc.Spec.Ports[0].TargetPort, r.dir)
		require.Equal(t, "http", rt.Spec.Template.Spec.Containers[0].Ports[0].Name, r.dir)
	}
}

// TestKubernetesOverlays: dev runs one of each process; production more,
// with a registry image and no generated secret (they are created apart).
func TestKubernetesOverlays(t *testing.T) {
	dev, prod := render(t, "overlays/dev"), render(t, "overlays/production")
	for name, d := range dev.deployments {
		if name == "causet-worker" {
			continue
		}
		require.Equal(t, ptr(int32(1)), d.Spec.Replicas, "dev: %s", name)
	}
	require.Equal(t, ptr(int32(1)), dev.hpas["causet-worker"].Spec.MinReplicas)
	for _, d := range dev.deployments {
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil && !ptrValue(ref.SecretKeyRef.Optional) {
				require.Contains(t, dev.secrets, ref.SecretKeyRef.Name, "dev: %s needs secret %s, which dev must generate", d.Name, ref.SecretKeyRef.Name)
			}
		}
	}

	require.Empty(t, prod.secrets, "production: secrets are created with kubectl, never kept in the repository")
	for name, d := range prod.deployments {
		c := d.Spec.Template.Spec.Containers[0]
		require.Contains(t, c.Image, "/", "production: %s runs an image from a registry", name)
		require.NotRegexp(t, `:(latest|dev)$`, c.Image, "production: %s pins a release tag", name)
		if name == "causet-worker" {
			continue
		}
		require.Greater(t, *d.Spec.Replicas, int32(1), "production: %s has more than one replica", name)
	}
	require.Greater(t, *prod.hpas["causet-worker"].Spec.MinReplicas, int32(1))
	for _, r := range []*rendered{dev, prod} {
		ns := ""
		for _, d := range r.deployments {
			if ns == "" {
				ns = d.Namespace
			}
			require.NotEmpty(t, d.Namespace, "%s: %s", r.dir, d.Name)
			require.Equal(t, ns, d.Namespace, "%s: one namespace", r.dir)
		}
	}
}
