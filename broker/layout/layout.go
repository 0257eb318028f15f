// Package layout names the parts of a walbus data directory, which the
// broker writes and the offline tools read:
//
//	DATA/namespace/                the namespace log: entities created, updated, deleted
//	DATA/metadata/log/             a cluster node's namespace log instead, the
//	                               metadata group's (its Raft state beside it)
//	DATA/entities/ID/log/          an entity's log (ID: its EntityCreated index, see DirName)
//	DATA/entities/ID/snapshots/    its snapshots
//	DATA/entities/ID/archive/      records compaction moved out of its log
//	DATA/reserve                   the emergency disk reserve, zeros (broker/disk.go)
package layout

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// The names of the directories.
const (
	Namespace = "namespace"
	Metadata  = "metadata"
	Entities  = "entities"
	Log       = "log"
	Snapshots = "snapshots"
	Archive   = "archive"
	Reserve   = "reserve"
)

// NamespaceDir is the namespace log's directory in data.
func NamespaceDir(data string) string { return filepath.Join(data, Namespace) }

// MetadataDir is a cluster node's metadata group member's directory in
// data: its log, the namespace log, is its LogDir.
func MetadataDir(data string) string { return filepath.Join(data, Metadata) }

// NamespaceLog is the directory of the namespace log of data, whether it
// is a single node's (NamespaceDir) or a cluster node's (MetadataDir's
// log): the offline tools read it there.
func NamespaceLog(data string) string {
	if _, err := os.Stat(MetadataDir(data)); err == nil {
		return LogDir(MetadataDir(data))
	}
	return NamespaceDir(data)
}

// EntitiesDir holds a directory per entity.
func EntitiesDir(data string) string { return filepath.Join(data, Entities) }

// EntityDir is the directory of the entity with id.
func EntityDir(data string, id uint64) string { return filepath.Join(data, Entities, DirName(id)) }

// DirName names an entity's directory: its id, zero-padded so that names
// sort as ids do.
func DirName(id uint64) string { return fmt.Sprintf("%0*d", dirNameLen, id) }

const dirNameLen = 20 // the digits of the largest uint64

// ParseDirName is the id of an entity directory, if name is one: exactly
// what DirName makes, so that a stray directory is never taken for one.
func ParseDirName(name string) (uint64, bool) {
	id, err := strconv.ParseUint(name, 10, 64)
	return id, err == nil && len(name) == dirNameLen
}

// LogDir is an entity's log directory; entity is its EntityDir.
func LogDir(entity string) string { return filepath.Join(entity, Log) }

// SnapshotDir is an entity's snapshot directory.
func SnapshotDir(entity string) string { return filepath.Join(entity, Snapshots) }

// ArchiveDir is an entity's archive directory.
func ArchiveDir(entity string) string { return filepath.Join(entity, Archive) }
