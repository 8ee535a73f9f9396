package capacity

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"cxlpool/dcd"
	"cxlpool/fabric/cci"
)

// The accounts database remembers which host reserved which chunk: the
// capacity ledger records chunks, not who asked for them, and a host must
// keep seeing the chunks it reserved across restarts.

// chunkOwnerTable is the chunk_owners table of the accounts database.
type chunkOwnerTable struct {
	db    *sql.DB
	clock func() time.Time
}

// ChunkOwners loads every chunk owner record.
func (s chunkOwnerTable) ChunkOwners(ctx context.Context) (map[dcd.ChunkID]chunkOwner, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT chunk_id, tag, host_id FROM chunk_owners`)
	if err != nil {
		return nil, fmt.Errorf("chunk owners: %w", err)
	}
	defer rows.Close()
	out := map[dcd.ChunkID]chunkOwner{}
	for rows.Next() {
		var id, host int64
		var tag []byte
		if err := rows.Scan(&id, &tag, &host); err != nil {
			return nil, fmt.Errorf("chunk owners: %w", err)
		}
		var o chunkOwner
		if copy(o.tag[:], tag) != len(cci.Tag{}) {
			continue // the CHECK constraint makes this impossible
		}
		o.host = dcd.HostID(host)
		out[dcd.ChunkID(id)] = o
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("chunk owners: %w", err)
	}
	return out, nil
}

// AddChunkOwner records that host reserved chunk id (tagged tag).
func (s chunkOwnerTable) AddChunkOwner(ctx context.Context, id dcd.ChunkID, tag cci.Tag, host dcd.HostID) error {
	_, err := s.db.ExecContext(ctx, `INSERT OR REPLACE INTO chunk_owners (chunk_id, tag, host_id, created) VALUES (?, ?, ?, ?)`,
		int64(id), tag[:], int64(host), s.clock().UnixNano())
	if err != nil {
		return fmt.Errorf("chunk owner %d: %w", id, err)
	}
	return nil
}

// DeleteChunkOwner forgets the owner of a deleted chunk.
func (s chunkOwnerTable) DeleteChunkOwner(ctx context.Context, id dcd.ChunkID) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM chunk_owners WHERE chunk_id = ?`, int64(id)); err != nil {
		return fmt.Errorf("chunk owner %d: %w", id, err)
	}
	return nil
}
