package broker

import (
	"bytes"
	"slices"
	"testing"

	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// clusterStateSample is a member snapshot's state at log index 3 and two
// records below it.
func clusterStateSample(t testing.TB) (raw []byte, records [][]byte) {
	st := projection.New()
	for i := uint64(1); i <= 3; i++ {
		ev := event.Event{Index: i, Type: event.Marker}
		if err := st.Apply(&ev); err != nil {
			t.Fatal(err)
		}
		if i < 3 {
			records = append(records, event.AppendRecord(nil, &ev))
		}
	}
	return st.Encode(nil), records
}

func TestClusterStateRoundTrip(t *testing.T) {
	raw, records := clusterStateSample(t)
	for _, recs := range [][][]byte{nil, records} {
		b := encodeClusterState(3, raw, recs)
		index, gotRaw, gotRecs, err := decodeClusterState(b)
		if err != nil || index != 3 || !bytes.Equal(gotRaw, raw) || !slices.EqualFunc(gotRecs, recs, bytes.Equal) {
			t.Fatalf("decoded %d, %d bytes, %d records (%v); want 3, %d bytes, %d records", index, len(gotRaw), len(gotRecs), err,
				len(raw), len(recs))
		}
		for n := range len(b) {
			if _, _, _, err := decodeClusterState(b[:n]); err == nil {
				t.Fatalf("a state cut to %d of %d bytes decodes", n, len(b))
			}
		}
		if _, _, _, err := decodeClusterState(append(slices.Clip(b), 0)); err == nil {
			t.Fatal("a state with a byte after it decodes")
		}
	}
	// Records out of order, repeated, or past the state's index.
	past := event.AppendRecord(nil, &event.Event{Index: 4, Type: event.Marker})
	for name, recs := range map[string][][]byte{
		"out of order": {records[1], records[0]},
		"repeated":     {records[0], records[0]},
		"past":         {records[0], past},
	} {
		if _, _, _, err := decodeClusterState(encodeClusterState(3, raw, recs)); err == nil {
			t.Errorf("records %s decode", name)
		}
	}
}

// FuzzDecodeClusterState: any input gives an error or a state that
// encodes again to what decodes the same.
func FuzzDecodeClusterState(f *testing.F) {
	raw, records := clusterStateSample(f)
	f.Add(encodeClusterState(3, raw, nil))
	f.Add(encodeClusterState(3, raw, records))
	f.Add([]byte(clusterStateMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		index, raw, recs, err := decodeClusterState(b)
		if err != nil {
			return
		}
		i2, raw2, recs2, err := decodeClusterState(encodeClusterState(index, raw, recs))
		if err != nil || i2 != index || !bytes.Equal(raw, raw2) || !slices.EqualFunc(recs, recs2, bytes.Equal) {
			t.Fatalf("decoded again: %d, %v", i2, err)
		}
	})
}
