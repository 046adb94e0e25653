package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWorkerVersioningOffByDefault(t *testing.T) {
	c, err := Load(env())
	require.NoError(t, err)
	require.Equal(t, WorkerVersioning{}, c.WorkerVersioning)
	require.False(t, c.WorkerVersioning.Enabled())
}

func TestWorkerVersioningBothSet(t *testing.T) {
	c, err := Load(env("CAUSET_WORKER_DEPLOYMENT", " causet-worker ", "CAUSET_WORKER_BUILD_ID", "1.4.2+git.3f9a1c2"))
	require.NoError(t, err)
	require.Equal(t, WorkerVersioning{DeploymentName: "causet-worker", BuildID: "1.4.2+git.3f9a1c2"}, c.WorkerVersioning)
	require.True(t, c.WorkerVersioning.Enabled())

	long := strings.Repeat("a", MaxWorkerVersionLen)
	v, err := LoadWorkerVersioning(env("CAUSET_WORKER_DEPLOYMENT", long, "CAUSET_WORKER_BUILD_ID", long))
	require.NoError(t, err)
	require.Equal(t, WorkerVersioning{DeploymentName: long, BuildID: long}, v)
}

func TestWorkerVersioningNeedsBoth(t *testing.T) {
	for _, tc := range []struct {
		kv   []string
		want string
	}{
		{[]string{"CAUSET_WORKER_DEPLOYMENT", "causet-worker"},
			"CAUSET_WORKER_DEPLOYMENT is set but CAUSET_WORKER_BUILD_ID is not: worker versioning needs both (or neither)"},
		{[]string{"CAUSET_WORKER_BUILD_ID", "abc123"},
			"CAUSET_WORKER_BUILD_ID is set but CAUSET_WORKER_DEPLOYMENT is not: worker versioning needs both (or neither)"},
	} {
		_, err := Load(env(tc.kv...))
		require.EqualError(t, err, tc.want)
		require.NotContains(t, err.Error(), "\n", "one line")
	}
}

func TestWorkerVersioningRefusesBadValues(t *testing.T) {
	tooLong := strings.Repeat("b", MaxWorkerVersionLen+1)
	for _, tc := range []struct{ name, build, bad string }{
		{"", "abc", "CAUSET_WORKER_DEPLOYMENT"},
		{"   ", "abc", "CAUSET_WORKER_DEPLOYMENT"},
		{"causet-worker", "", "CAUSET_WORKER_BUILD_ID"},
		{"causet-worker", " \t", "CAUSET_WORKER_BUILD_ID"},
		{"causet.worker", "abc", "CAUSET_WORKER_DEPLOYMENT"}, // Temporal: '.' delimits v0.31 version strings
		{"causet:worker", "abc", "CAUSET_WORKER_DEPLOYMENT"}, // and ':' the current ones
		{"__causet", "abc", "CAUSET_WORKER_DEPLOYMENT"},      // reserved by Temporal
		{"causet-worker", "__unversioned__", "CAUSET_WORKER_BUILD_ID"},
		{"causet worker", "abc", "CAUSET_WORKER_DEPLOYMENT"},
		{"causet-worker", "abc def", "CAUSET_WORKER_BUILD_ID"},
		{"causet-worker", "v1:2", "CAUSET_WORKER_BUILD_ID"},
		{"causet-worker", "v1/2", "CAUSET_WORKER_BUILD_ID"},
		{"causet-wörker", "abc", "CAUSET_WORKER_DEPLOYMENT"},
		{tooLong, "abc", "CAUSET_WORKER_DEPLOYMENT"},
		{"causet-worker", tooLong, "CAUSET_WORKER_BUILD_ID"},
	} {
		_, err := Load(env("CAUSET_WORKER_DEPLOYMENT", tc.name, "CAUSET_WORKER_BUILD_ID", tc.build))
		require.Error(t, err, "%q / %q", tc.name, tc.build)
		require.True(t, strings.HasPrefix(err.Error(), tc.bad+"="), "%q / %q: %v", tc.name, tc.build, err)
		require.Contains(t, err.Error(), "is invalid: want 1 to 100 of the characters")
		require.NotContains(t, err.Error(), "\n", "one line")
	}
}
