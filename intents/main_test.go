package intents_test

import (
	"testing"

	"github.com/causet/projection-retry/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
