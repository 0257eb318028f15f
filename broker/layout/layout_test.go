package layout

import (
	"math"
	"path/filepath"
	"testing"
)

func TestDirNames(t *testing.T) {
	for _, id := range []uint64{1, 42, math.MaxUint64} {
		name := DirName(id)
		if got, ok := ParseDirName(name); !ok || got != id {
			t.Errorf("ParseDirName(DirName(%d) = %q) = %d, %v", id, name, got, ok)
		}
	}
	if DirName(7) != "00000000000000000007" {
		t.Errorf("DirName(7) = %q", DirName(7))
	}
	// Only names the broker makes are entity directories: a directory
	// someone left there is neither read nor removed as an orphan.
	for _, name := range []string{"7", "0000000000000000007", "000000000000000000007", "0000000000000000000x", "", "lost+found"} {
		if id, ok := ParseDirName(name); ok {
			t.Errorf("ParseDirName(%q) = %d, want not an entity directory", name, id)
		}
	}
	if got, want := LogDir(EntityDir("/data", 3)), filepath.FromSlash("/data/entities/00000000000000000003/log"); got != want {
		t.Errorf("LogDir = %q, want %q", got, want)
	}
}
