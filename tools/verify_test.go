package tools

import (
	"crypto/sha256"
	"encoding/binary"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/walbus/walbus/broker/layout"
	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
	"github.com/walbus/walbus/snapshot"
)

// treeSums fingerprints every file and directory under dir, to prove the
// tools leave a data directory as they found it.
func treeSums(t testing.TB, dir string) map[string][32]byte {
	t.Helper()
	sums := map[string][32]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			sums[rel+"/"] = [32]byte{}
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		sums[rel] = sha256.Sum256(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sums
}

func sameTree(a, b map[string][32]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// verifyUnchanged runs Verify and checks that it changed nothing.
func verifyUnchanged(t *testing.T, data string) []Finding {
	t.Helper()
	before := treeSums(t, data)
	findings, err := Verify(data)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if !sameTree(before, treeSums(t, data)) {
		t.Fatal("verify changed the data directory")
	}
	return findings
}

// wantFinding fails unless some finding starts with prefix and contains
// every one of words.
func wantFinding(t *testing.T, findings []Finding, prefix string, words ...string) {
	t.Helper()
next:
	for _, f := range findings {
		s := f.String()
		if !strings.HasPrefix(s, prefix) {
			continue
		}
		for _, w := range words {
			if !strings.Contains(s, w) {
				continue next
			}
		}
		return
	}
	t.Fatalf("no finding %q with %q; findings:\n%s", prefix, words, sprintLines(findings))
}

// record returns where record index sits in the segment starting at first.
func record(t *testing.T, logDir string, first, index uint64) log.RecordInfo {
	t.Helper()
	ro, err := log.OpenReadOnly(logDir)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var found log.RecordInfo
	prob, err := ro.WalkSegment(first, func(rec log.RecordInfo) error {
		if rec.Event.Index == index {
			found = rec
		}
		return nil
	})
	if err != nil || prob != nil || found.Size == 0 {
		t.Fatalf("record %d in segment %d: %v %v", index, first, err, prob)
	}
	return found
}

func mutate(t *testing.T, path string, fn func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, fn(b), 0o640); err != nil {
		t.Fatal(err)
	}
}

func segPath(e EntityInfo, first uint64) string {
	return filepath.Join(e.LogDir(), log.SegmentName(first))
}

// appendRecord adds ev to the segment file at path in tidwall's framing (a
// uvarint length, then the envelope).
func appendRecord(t *testing.T, path string, ev event.Event) {
	t.Helper()
	env := event.AppendRecord(nil, &ev)
	mutate(t, path, func(b []byte) []byte { return append(binary.AppendUvarint(b, uint64(len(env))), env...) })
}

func TestVerifyClean(t *testing.T) {
	if f := verifyUnchanged(t, goldenDir(t)); len(f) != 0 {
		t.Fatalf("findings in a clean directory:\n%s", sprintLines(f))
	}
}

// The golden orders log has segments starting at 1, 8 and 20 and a
// snapshot at 23 (its last index).

func TestVerifyBitFlipInOldSegment(t *testing.T) {
	data := copyTree(t, goldenDir(t))
	e := entityDirOf(t, data, "orders")
	rec := record(t, e.LogDir(), 1, 5)
	mutate(t, segPath(e, 1), func(b []byte) []byte {
		b[rec.Offset+int64(rec.Size)/2] ^= 0x10
		return b
	})
	f := verifyUnchanged(t, data)
	wantFinding(t, f, "orders/00000000000000000001/5: corrupt record at offset", "checksum", "valid records follow")
	// The replay stops there, so the snapshot cannot be matched.
	wantFinding(t, f, "orders/snap-00000000000000000023.wbs/23: snapshot is past the last record the replay of the log reached (4)")
}

func TestVerifyTruncatedSnapshot(t *testing.T) {
	data := copyTree(t, goldenDir(t))
	e := entityDirOf(t, data, "orders")
	mutate(t, filepath.Join(e.SnapshotDir(), "snap-00000000000000000023.wbs"), func(b []byte) []byte { return b[:len(b)/2] })
	f := verifyUnchanged(t, data)
	wantFinding(t, f, "orders/snap-00000000000000000023.wbs/23: snapshot unreadable", "snapshot corrupt")
	if len(f) != 1 {
		t.Fatalf("want one finding:\n%s", sprintLines(f))
	}
}

func TestVerifyMissingSegment(t *testing.T) {
	data := copyTree(t, goldenDir(t))
	e := entityDirOf(t, data, "orders")
	if err := os.Remove(segPath(e, 8)); err != nil {
		t.Fatal(err)
	}
	f := verifyUnchanged(t, data)
	wantFinding(t, f, "orders/00000000000000000008/8: records 8-19 are missing")
}

func TestVerifyTornTail(t *testing.T) {
	data := copyTree(t, goldenDir(t))
	e := entityDirOf(t, data, "orders")
	// A crash before the final snapshot: the log alone, its last record torn.
	if err := os.RemoveAll(e.SnapshotDir()); err != nil {
		t.Fatal(err)
	}
	rec := record(t, e.LogDir(), 20, 23)
	mutate(t, segPath(e, 20), func(b []byte) []byte { return b[:len(b)-3] })
	f := verifyUnchanged(t, data)
	wantFinding(t, f, "orders/00000000000000000020/23: torn tail at offset "+strconv.FormatInt(rec.Offset, 10), "the server cuts the log here")
	if len(f) != 1 {
		t.Fatalf("want one finding:\n%s", sprintLines(f))
	}
}

func TestVerifyCorruptionInLastSegment(t *testing.T) {
	data := copyTree(t, goldenDir(t))
	e := entityDirOf(t, data, "orders")
	rec := record(t, e.LogDir(), 20, 21)
	mutate(t, segPath(e, 20), func(b []byte) []byte {
		b[rec.Offset+int64(rec.Size)-1] ^= 1 // the CRC's last byte
		return b
	})
	f := verifyUnchanged(t, data)
	wantFinding(t, f, "orders/00000000000000000020/21: corrupt record", "the server refuses to open the log")
}

func TestVerifySnapshotDiffersFromLog(t *testing.T) {
	data := copyTree(t, goldenDir(t))
	e := entityDirOf(t, data, "orders")
	// A snapshot at 23 that missed event 22 (seq 5 received and deleted).
	st := projection.New()
	ro, err := log.OpenReadOnly(e.LogDir())
	if err != nil {
		t.Fatal(err)
	}
	dmg, err := readLog(ro, 1, 0, func(ev *event.Event, _ string) error {
		if ev.Index == 22 {
			return nil
		}
		return st.Apply(ev)
	})
	ro.Close()
	if dmg != nil || err != nil {
		t.Fatal(dmg, err)
	}
	if _, err := snapshot.Write(e.SnapshotDir(), 23, st.Encode(nil)); err != nil {
		t.Fatal(err)
	}
	f := verifyUnchanged(t, data)
	wantFinding(t, f, "orders/snap-00000000000000000023.wbs/23: snapshot differs from the replay of the log up to index 23")
	if len(f) != 1 {
		t.Fatalf("want one finding:\n%s", sprintLines(f))
	}
}

func TestVerifyEventThatDoesNotApply(t *testing.T) {
	data := copyTree(t, goldenDir(t))
	e := entityDirOf(t, data, "orders")
	appendRecord(t, segPath(e, 20), event.Event{Type: event.Completed, Index: 24, Time: sceneEpoch.UnixNano() + 200e9, Seq: 99})
	f := verifyUnchanged(t, data)
	wantFinding(t, f, "orders/00000000000000000020/24: completed does not apply", "no message 99")
}

func TestVerifyUnfinishedGroup(t *testing.T) {
	data := copyTree(t, goldenDir(t))
	e := entityDirOf(t, data, "orders")
	appendRecord(t, segPath(e, 20), event.Event{Type: event.Enqueued, Flags: event.FlagContinued, Index: 24,
		Time: sceneEpoch.UnixNano() + 200e9, MessageID: "half", Message: []byte("x")})
	f := verifyUnchanged(t, data)
	wantFinding(t, f, "orders/00000000000000000020/24: unfinished atomic group from index 24")

	// state leaves the group out, as the server does.
	rep, err := State(data, "orders", StateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Index != 23 || rep.Queues[0].Total != 1 || len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "unfinished atomic group") {
		t.Fatalf("state over an unfinished group: index %d, %+v, notes %q", rep.Index, rep.Queues[0], rep.Notes)
	}
}

func TestVerifyNamespaceAndEntityDirs(t *testing.T) {
	data := copyTree(t, goldenDir(t))
	// Without its entity-deleted record, "empty" is live again, but its
	// directory was removed; and a stray directory appears.
	if err := os.Remove(filepath.Join(layout.NamespaceDir(data), log.SegmentName(3))); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(layout.LogDir(layout.EntityDir(data, 7)), 0o750); err != nil {
		t.Fatal(err)
	}
	f := verifyUnchanged(t, data)
	wantFinding(t, f, "empty/-/-: directory entities/00000000000000000002 is missing")
	wantFinding(t, f, "$entity-7/-/-: directory entities/00000000000000000007 is not an entity of the namespace log")
	if len(f) != 2 {
		t.Fatalf("want two findings:\n%s", sprintLines(f))
	}
}

// A cluster member's log holds markers (Raft entries without events,
// written with no time of the entity's) and records in envelope version 2:
// verify passes over them.
func TestVerifyClusterMemberRecords(t *testing.T) {
	data := copyTree(t, goldenDir(t))
	e := entityDirOf(t, data, "orders")
	appendRecord(t, segPath(e, 20), event.Event{Type: event.Marker, Index: 24, Term: 2, Entry: 30})
	appendRecord(t, segPath(e, 20), event.Event{Type: event.Checkpoint, Index: 25, Time: sceneEpoch.UnixNano() + 300e9,
		Term: 2, Entry: 31, Tag: 25})
	if f := verifyUnchanged(t, data); len(f) != 0 {
		t.Fatalf("findings in a log with a marker:\n%s", sprintLines(f))
	}
}
