package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestIncidentDefaults(t *testing.T) {
	c, err := Load(env())
	require.NoError(t, err)
	require.Equal(t, Incidents{Threshold: 20, Window: time.Minute, Policy: IncidentDeadLetter, HoldMax: 24 * time.Hour, MaxHeld: 1_000_000}, c.Incidents)
}

func TestIncidentSettings(t *testing.T) {
	c, err := Load(env("CAUSET_INCIDENT_THRESHOLD", "5", "CAUSET_INCIDENT_WINDOW", "30s", "CAUSET_INCIDENT_POLICY", "hold",
		"CAUSET_INCIDENT_HOLD_MAX", "2h", "CAUSET_INCIDENT_MAX_HELD", "500"))
	require.NoError(t, err)
	require.Equal(t, Incidents{Threshold: 5, Window: 30 * time.Second, Policy: IncidentHold, HoldMax: 2 * time.Hour, MaxHeld: 500}, c.Incidents)
}

func TestIncidentSettingsRefused(t *testing.T) {
	for _, tc := range []struct {
		kv   []string
		want string
	}{
		{[]string{"CAUSET_INCIDENT_THRESHOLD", "1"}, `CAUSET_INCIDENT_THRESHOLD="1" is invalid: want an integer from 2 to 10000`},
		{[]string{"CAUSET_INCIDENT_THRESHOLD", "lots"}, `CAUSET_INCIDENT_THRESHOLD="lots" is invalid`},
		{[]string{"CAUSET_INCIDENT_WINDOW", "500ms"}, `CAUSET_INCIDENT_WINDOW=500ms is invalid: want a duration from 1s to 1h`},
		{[]string{"CAUSET_INCIDENT_WINDOW", "2h"}, `CAUSET_INCIDENT_WINDOW=2h0m0s is invalid`},
		{[]string{"CAUSET_INCIDENT_POLICY", "park"}, `CAUSET_INCIDENT_POLICY="park" is invalid`},
		{[]string{"CAUSET_INCIDENT_MAX_HELD", "0"}, `CAUSET_INCIDENT_MAX_HELD="0" is invalid`},
		{[]string{"CAUSET_INCIDENT_HOLD_MAX", "-1h"}, `CAUSET_INCIDENT_HOLD_MAX="-1h" is invalid`},
		{[]string{"CAUSET_INCIDENT_POLICY", "hold", "CAUSET_ORDERING", "none"}, `CAUSET_INCIDENT_POLICY=hold needs CAUSET_BRIDGE_MODE=inline and CAUSET_ORDERING=entity`},
		{[]string{"CAUSET_INCIDENT_POLICY", "hold", "CAUSET_BRIDGE_MODE", "workflow"}, `CAUSET_INCIDENT_POLICY=hold needs CAUSET_BRIDGE_MODE=inline and CAUSET_ORDERING=entity`},
	} {
		_, err := Load(env(tc.kv...))
		require.ErrorContains(t, err, tc.want, "%v", tc.kv)
	}
}
