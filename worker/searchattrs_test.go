package worker

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/causet/projection-retry/contract"
)

// fakeOperator is an operator service that already has some attributes and
// may refuse to add more.
type fakeOperator struct {
	operatorservice.OperatorServiceClient
	existing map[string]enumspb.IndexedValueType
	addErr   error
	added    map[string]enumspb.IndexedValueType
}

func (f *fakeOperator) ListSearchAttributes(context.Context, *operatorservice.ListSearchAttributesRequest, ...grpc.CallOption) (*operatorservice.ListSearchAttributesResponse, error) {
	return &operatorservice.ListSearchAttributesResponse{CustomAttributes: f.existing}, nil
}

func (f *fakeOperator) AddSearchAttributes(_ context.Context, req *operatorservice.AddSearchAttributesRequest, _ ...grpc.CallOption) (*operatorservice.AddSearchAttributesResponse, error) {
	if f.addErr != nil {
		return nil, f.addErr
	}
	f.added = req.GetSearchAttributes()
	return &operatorservice.AddSearchAttributesResponse{}, nil
}

func TestEnsureSearchAttributesAddsMissing(t *testing.T) {
	f := &fakeOperator{existing: map[string]enumspb.IndexedValueType{"CausetProjection": enumspb.INDEXED_VALUE_TYPE_KEYWORD}}
	require.NoError(t, EnsureSearchAttributes(context.Background(), f, "default"))
	require.Len(t, f.added, len(contract.SearchAttributeNames)-1+len(contract.IntSearchAttributeNames))
	for name, typ := range f.added {
		want := enumspb.INDEXED_VALUE_TYPE_KEYWORD
		if strings.HasPrefix(name, "CausetRollout") {
			want = enumspb.INDEXED_VALUE_TYPE_INT
		}
		require.Equal(t, want, typ, name)
	}
	require.NotContains(t, f.added, "CausetProjection")
}

func TestEnsureSearchAttributesPrintsCommandsWhenRefused(t *testing.T) {
	f := &fakeOperator{
		existing: map[string]enumspb.IndexedValueType{"CausetProjection": enumspb.INDEXED_VALUE_TYPE_KEYWORD},
		addErr:   status.Error(codes.PermissionDenied, "request unauthorized"),
	}
	err := EnsureSearchAttributes(context.Background(), f, "prod")
	require.Error(t, err)
	lines := strings.Split(err.Error(), "\n")
	require.Contains(t, lines[0], "CausetEventType, CausetEntityId, CausetForkId, CausetRetryState, CausetIncidentState, CausetError, "+
		"CausetRolloutAffected, CausetRolloutApplied, CausetRolloutFailing are missing in namespace \"prod\"")
	require.Contains(t, lines[0], "request unauthorized")
	require.Equal(t, []string{
		"  temporal operator search-attribute create --namespace prod --name CausetEventType --type Keyword",
		"  temporal operator search-attribute create --namespace prod --name CausetEntityId --type Keyword",
		"  temporal operator search-attribute create --namespace prod --name CausetForkId --type Keyword",
		"  temporal operator search-attribute create --namespace prod --name CausetRetryState --type Keyword",
		"  temporal operator search-attribute create --namespace prod --name CausetIncidentState --type Keyword",
		"  temporal operator search-attribute create --namespace prod --name CausetError --type Keyword",
		"  temporal operator search-attribute create --namespace prod --name CausetRolloutAffected --type Int",
		"  temporal operator search-attribute create --namespace prod --name CausetRolloutApplied --type Int",
		"  temporal operator search-attribute create --namespace prod --name CausetRolloutFailing --type Int",
	}, lines[1:])
}

// On SQL visibility a namespace holds at most 3 custom Int attributes: one
// that has an Int of its own has no room for the rollout's three, and the
// commands would fail too. The error says so and what to do instead (the
// server's message as Temporal v1.29's SQL visibility words it).
func TestEnsureSearchAttributesNoRoomInTheVisibilityStore(t *testing.T) {
	f := &fakeOperator{
		existing: map[string]enumspb.IndexedValueType{"OrderTotal": enumspb.INDEXED_VALUE_TYPE_INT},
		addErr:   status.Error(codes.FailedPrecondition, "Unable to create search attributes: cannot have more than 3 search attribute of type Int."),
	}
	err := EnsureSearchAttributes(context.Background(), f, "orders")
	require.Error(t, err)
	msg := err.Error()
	require.NotContains(t, msg, "\n", "one line: the create commands would fail as well")
	require.Contains(t, msg, `are missing in namespace "orders" and there is no room for them`)
	require.Contains(t, msg, "cannot have more than 3 search attribute of type Int")
	require.Contains(t, msg, "Causet needs 7 Keyword and 3 Int custom search attributes")
	require.Contains(t, msg, "give Causet a namespace of its own")
}

func TestEnsureSearchAttributesNothingToDo(t *testing.T) {
	f := &fakeOperator{existing: map[string]enumspb.IndexedValueType{}, addErr: status.Error(codes.PermissionDenied, "no")}
	for _, n := range contract.SearchAttributeNames {
		f.existing[n] = enumspb.INDEXED_VALUE_TYPE_KEYWORD
	}
	for _, n := range contract.IntSearchAttributeNames {
		f.existing[n] = enumspb.INDEXED_VALUE_TYPE_INT
	}
	require.NoError(t, EnsureSearchAttributes(context.Background(), f, "default"))
}
