package lifecycle

import (
	"testing"
	"time"
)

func TestUnreachableStep(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	zero := time.Duration(0)
	for _, tc := range []struct {
		name            string
		state           State
		at              time.Duration // after t0
		grace, withdraw time.Duration
		want            Step
		next            time.Duration // after t0; -1 for none
	}{
		{"reachable", State{Phase: Synced}, time.Hour, time.Second, time.Minute, Keep, -1},
		{"within grace", State{Unreachable: true, Since: t0}, time.Second, time.Minute, time.Hour, Keep, time.Minute},
		{"after grace", State{Unreachable: true, Since: t0}, 2 * time.Minute, time.Minute, time.Hour, MarkNotReady, time.Hour},
		{"after withdraw", State{Unreachable: true, Since: t0}, 2 * time.Hour, time.Minute, time.Hour, Withdraw, -1},
		{"keep forever", State{Unreachable: true, Since: t0}, 100 * time.Hour, 0, 0, Keep, -1},
		{"withdraw only", State{Unreachable: true, Since: t0}, time.Second, 0, time.Minute, Keep, time.Minute},
		{"grace not before withdraw", State{Unreachable: true, Since: t0}, time.Second, time.Hour, time.Minute, Keep, time.Minute},
		{"override turns withdraw off", State{Unreachable: true, Since: t0, Policy: Policy{Withdraw: &zero}}, 2 * time.Hour, time.Minute, time.Hour, MarkNotReady, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			step, next := tc.state.UnreachableStep(t0.Add(tc.at), tc.grace, tc.withdraw)
			if step != tc.want {
				t.Errorf("step = %v, want %v", step, tc.want)
			}
			wantNext := time.Time{}
			if tc.next >= 0 {
				wantNext = t0.Add(tc.next)
			}
			if !next.Equal(wantNext) {
				t.Errorf("next = %v, want %v", next, wantNext)
			}
		})
	}
}
