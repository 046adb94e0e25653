package config

import (
	"fmt"
	"strings"
)

// MaxWorkerVersionLen bounds the deployment name and the build ID. Temporal
// keeps a version as the workflow "temporal-sys-worker-deployment-version:
// <name>:<buildId>"; on PostgreSQL or MySQL persistence a workflow ID is at
// most 255 characters, so two fields of 100 leave room for the prefix.
const MaxWorkerVersionLen = 100

// WorkerVersioning is the worker's Worker Deployment Version
// (CAUSET_WORKER_DEPLOYMENT, CAUSET_WORKER_BUILD_ID). Both empty: the worker
// is unversioned.
type WorkerVersioning struct {
	// DeploymentName names the Worker Deployment, the same for every build.
	DeploymentName string
	// BuildID names this build, one per image.
	BuildID string
}

// Enabled reports whether the worker polls as a deployment version.
func (v WorkerVersioning) Enabled() bool { return v.DeploymentName != "" && v.BuildID != "" }

// LoadWorkerVersioning reads CAUSET_WORKER_DEPLOYMENT and
// CAUSET_WORKER_BUILD_ID: both unset, or both set and valid. One alone is an
// error, as a worker that silently ran unversioned would take tasks meant
// for the deployment's unversioned workers.
func LoadWorkerVersioning(lookup Lookup) (WorkerVersioning, error) {
	const nameKey, buildKey = "CAUSET_WORKER_DEPLOYMENT", "CAUSET_WORKER_BUILD_ID"
	name, nameSet := lookup(nameKey)
	build, buildSet := lookup(buildKey)
	switch {
	case !nameSet && !buildSet:
		return WorkerVersioning{}, nil
	case !buildSet:
		return WorkerVersioning{}, fmt.Errorf("%s is set but %s is not: worker versioning needs both (or neither)", nameKey, buildKey)
	case !nameSet:
		return WorkerVersioning{}, fmt.Errorf("%s is set but %s is not: worker versioning needs both (or neither)", buildKey, nameKey)
	}
	name, build = strings.TrimSpace(name), strings.TrimSpace(build)
	// Temporal refuses '.' and ':' in a deployment name (they delimit
	// version strings) and a leading "__" in either field (reserved).
	if !versionField(name, false) {
		return WorkerVersioning{}, fmt.Errorf("%s=%q is invalid: want 1 to %d of the characters a-z A-Z 0-9 _ - (no '.' or ':'), not starting with \"__\"",
			nameKey, name, MaxWorkerVersionLen)
	}
	if !versionField(build, true) {
		return WorkerVersioning{}, fmt.Errorf("%s=%q is invalid: want 1 to %d of the characters a-z A-Z 0-9 . _ - +, not starting with \"__\" (a git SHA or an image tag)",
			buildKey, build, MaxWorkerVersionLen)
	}
	return WorkerVersioning{DeploymentName: name, BuildID: build}, nil
}

func versionField(v string, build bool) bool {
	if v == "" || len(v) > MaxWorkerVersionLen || strings.HasPrefix(v, "__") {
		return false
	}
	return strings.IndexFunc(v, func(r rune) bool {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			return false
		case build && (r == '.' || r == '+'):
			return false
		}
		return true
	}) < 0
}
