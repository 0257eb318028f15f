package simulation

import (
	"fmt"
	"os"
	"strconv"
)

// Seeds is the range of seeds a test runs: n from 1, unless the
// environment says otherwise. WALBUS_SIM_SEEDS sets how many
// (`make full-size` asks for thousands); WALBUS_SIM_SEED runs the one
// it names, to see a failure again.
func Seeds(n int) (first uint64, count int, err error) {
	first, count = 1, n
	if s := os.Getenv("WALBUS_SIM_SEEDS"); s != "" {
		if count, err = strconv.Atoi(s); err != nil {
			return 0, 0, fmt.Errorf("WALBUS_SIM_SEEDS: %w", err)
		}
	}
	if s := os.Getenv("WALBUS_SIM_SEED"); s != "" {
		if first, err = strconv.ParseUint(s, 10, 64); err != nil {
			return 0, 0, fmt.Errorf("WALBUS_SIM_SEED: %w", err)
		}
		count = 1
	}
	return first, count, nil
}
