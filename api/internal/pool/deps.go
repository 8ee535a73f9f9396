package pool

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"cxlpool/api/redfish"
	"cxlpool/dcd"
)

// Deps is what every resource package's constructor takes besides its own
// Config: the protocol service its routes register on, the capacity
// manager the resources are views of, the logger and clock, and the
// context and WaitGroup of its background feeders. Ctx ends when the
// service stops; the assembly's Close waits for BG after that.
type Deps struct {
	Service *redfish.Service
	Manager *dcd.Manager
	Logger  *slog.Logger
	Clock   func() time.Time
	Ctx     context.Context
	BG      *sync.WaitGroup
}
