package redfish

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
)

const (
	TaskServiceURI  = "/redfish/v1/TaskService"
	tasksURI        = TaskServiceURI + "/Tasks"
	taskMonitorsURI = TaskServiceURI + "/TaskMonitors"
)

// Task states (Task.TaskState).
const (
	TaskNew       = "New"
	TaskRunning   = "Running"
	TaskCompleted = "Completed"
	TaskException = "Exception"
)

// TaskResult is what a finished task's monitor answers, as the request
// would have been answered had it been quick: a status (200 if zero), an
// optional Location and body, and extra messages for the Task resource.
type TaskResult struct {
	Status   int
	Location string
	Body     any
	Messages []Msg
}

// TaskFunc is a task's work. ctx ends when the service stops. An error is
// mapped through Config.MapError (with the task's Target) to the monitor's
// final response and the task ends Exception.
type TaskFunc func(ctx context.Context, t *Task) (TaskResult, error)

// Task is one long-running operation.
type Task struct {
	ID     string
	Name   string
	Owner  string  // identity (Account.UID) of the principal that started it
	Host   *HostID // the host it concerns, for host isolation
	Target Target  // for mapping the task's error

	mu       sync.Mutex
	state    string
	percent  int
	start    time.Time
	end      time.Time
	messages []Msg
	result   TaskResult
	err      *Error
	done     chan struct{}
}

// SetPercent records progress (0–100).
func (t *Task) SetPercent(n int) {
	t.mu.Lock()
	t.percent = min(max(n, 0), 100)
	t.mu.Unlock()
}

// Done is closed when the task has finished.
func (t *Task) Done() <-chan struct{} { return t.done }

// State returns the task's TaskState.
func (t *Task) State() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.state
}

// MonitorURI is the task monitor clients poll.
func (t *Task) MonitorURI() string { return taskMonitorsURI + "/" + t.ID }

// URI is the Task resource.
func (t *Task) URI() string { return tasksURI + "/" + t.ID }

type taskEngine struct {
	s *Service

	mu    sync.Mutex
	next  int
	tasks map[string]*Task
	order []string // creation order, for listing and retention
}

func newTaskEngine(s *Service) *taskEngine {
	return &taskEngine{s: s, tasks: map[string]*Task{}}
}

// TaskOptions describe a task to start.
type TaskOptions struct {
	Name   string
	Host   *HostID
	Target Target
}

// StartTask runs fn in the background as a Task owned by the request's
// principal. Answer the request with Accepted.
func (s *Service) StartTask(c echo.Context, opts TaskOptions, fn TaskFunc) *Task {
	owner := ""
	if p := PrincipalOf(c); p != nil {
		owner = p.AccountUID
	}
	return s.tasks.start(owner, opts, fn)
}

func (e *taskEngine) start(owner string, opts TaskOptions, fn TaskFunc) *Task {
	s := e.s
	e.mu.Lock()
	e.next++
	t := &Task{ID: strconv.Itoa(e.next), Name: opts.Name, Owner: owner, Host: opts.Host, Target: opts.Target,
		state: TaskRunning, start: s.now(), done: make(chan struct{})}
	e.tasks[t.ID] = t
	e.order = append(e.order, t.ID)
	e.pruneLocked()
	e.mu.Unlock()
	s.Publish(Event{MessageKey: "TaskEvent.TaskStarted", Args: []string{t.ID}, Origin: t.URI(), Host: t.Host})
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		res, err := e.run(t, fn)
		t.mu.Lock()
		t.end = s.now()
		t.percent = 100
		key := "TaskEvent.TaskCompletedOK"
		if err != nil {
			t.state, t.err = TaskException, s.mapError(err, t.Target)
			key = "TaskEvent.TaskAborted"
			t.messages = append([]Msg{M(key, t.ID)}, t.err.Messages...)
		} else {
			t.state, t.result = TaskCompleted, res
			t.messages = append([]Msg{M(key, t.ID)}, res.Messages...)
		}
		t.mu.Unlock()
		close(t.done)
		if err != nil {
			s.log.Info("task failed", "task", t.ID, "name", t.Name, "err", err)
		}
		s.Publish(Event{MessageKey: key, Args: []string{t.ID}, Origin: t.URI(), Host: t.Host})
	}()
	return t
}

// run calls fn, turning a panic into an internal error like a handler's.
func (e *taskEngine) run(t *Task, fn TaskFunc) (res TaskResult, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = ErrInternal(fmt.Errorf("task %s panicked: %v", t.ID, r))
		}
	}()
	return fn(e.s.ctx, t)
}

// pruneLocked forgets the oldest finished tasks beyond the limit.
func (e *taskEngine) pruneLocked() {
	finished := 0
	for _, id := range e.order {
		if e.tasks[id].State() != TaskRunning {
			finished++
		}
	}
	for i := 0; finished > e.s.cfg.TaskLimit && i < len(e.order); {
		id := e.order[i]
		if e.tasks[id].State() == TaskRunning {
			i++
			continue
		}
		delete(e.tasks, id)
		e.order = slices.Delete(e.order, i, i+1)
		finished--
	}
}

func (e *taskEngine) running() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, t := range e.tasks {
		if t.State() == TaskRunning {
			n++
		}
	}
	return n
}

// visibleTask: host principals see only their own and their host's tasks.
// "Their own" is by account identity, never by Id or name, so a task is
// not inherited by an account made after its owner was deleted.
func visibleTask(p *Principal, t *Task) bool {
	if !p.IsHost() {
		return true
	}
	return (t.Owner != "" && t.Owner == p.AccountUID) || (t.Host != nil && *t.Host == *p.HostID)
}

func (e *taskEngine) get(p *Principal, id string) (*Task, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.tasks[id]
	if !ok || !visibleTask(p, t) {
		return nil, false
	}
	return t, true
}

func (e *taskEngine) list(p *Principal) []*Task {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*Task
	for _, id := range e.order {
		if t := e.tasks[id]; visibleTask(p, t) {
			out = append(out, t)
		}
	}
	return out
}

// Accepted answers a request whose work continues in task t: 202 with the
// task monitor in Location and the Task resource as the body.
func (s *Service) Accepted(c echo.Context, t *Task) error {
	c.Response().Header().Set("Location", t.MonitorURI())
	c.Response().Header().Set("Retry-After", "1")
	return s.WriteResource(c, http.StatusAccepted, s.taskBody(t))
}

// TaskBodies are the Task resources the service keeps, in creation order
// (the support bundle's).
func (s *Service) TaskBodies() []Obj {
	e := s.tasks
	e.mu.Lock()
	ts := make([]*Task, 0, len(e.order))
	for _, id := range e.order {
		ts = append(ts, e.tasks[id])
	}
	e.mu.Unlock()
	out := make([]Obj, 0, len(ts))
	for _, t := range ts {
		out = append(out, s.taskBody(t))
	}
	return out
}

func (s *Service) taskBody(t *Task) Obj {
	t.mu.Lock()
	defer t.mu.Unlock()
	status := "OK"
	if t.state == TaskException {
		status = "Critical"
	}
	msgs := make([]Message, 0, len(t.messages))
	for _, m := range t.messages {
		msgs = append(msgs, s.reg.Resolve(m))
	}
	o := Obj{
		"@odata.id":       t.URI(),
		"@odata.type":     "#Task.v1_7_4.Task",
		"Id":              t.ID,
		"Name":            t.Name,
		"TaskState":       t.state,
		"TaskStatus":      status,
		"PercentComplete": t.percent,
		"StartTime":       t.start.Format(TimeFormat),
		"TaskMonitor":     t.MonitorURI(),
		"Messages":        msgs,
		"HidePayload":     true,
	}
	if !t.end.IsZero() {
		o["EndTime"] = t.end.Format(TimeFormat)
	}
	return o
}

func (s *Service) taskRoutes() {
	s.Handle(http.MethodGet, TaskServiceURI, PrivLogin, func(c echo.Context) error {
		return s.WriteResource(c, http.StatusOK, Obj{
			"@odata.id":                       TaskServiceURI,
			"@odata.type":                     "#TaskService.v1_3_0.TaskService",
			"Id":                              "TaskService",
			"Name":                            "Task Service",
			"ServiceEnabled":                  true,
			"CompletedTaskOverWritePolicy":    "Oldest",
			"LifeCycleEventOnTaskStateChange": true,
			"Status":                          Obj{"State": "Enabled", "Health": "OK"},
			"Tasks":                           Link(tasksURI),
		})
	})
	s.Handle(http.MethodGet, tasksURI, PrivLogin, func(c echo.Context) error {
		ts := s.tasks.list(PrincipalOf(c))
		byURI := map[string]*Task{}
		uris := make([]string, len(ts))
		for i, t := range ts {
			uris[i] = t.URI()
			byURI[uris[i]] = t
		}
		return s.WriteCollection(c, Collection{ODataID: tasksURI, ODataType: "#TaskCollection.TaskCollection",
			Name: "Tasks", Members: uris,
			Expand: func(uri string) (any, error) { return s.taskBody(byURI[uri]), nil }})
	})
	s.Handle(http.MethodGet, tasksURI+"/:id", PrivLogin, func(c echo.Context) error {
		t, ok := s.tasks.get(PrincipalOf(c), c.Param("id"))
		if !ok {
			return ErrResourceNotFound("Task", c.Param("id"))
		}
		return s.WriteResource(c, http.StatusOK, s.taskBody(t))
	})
	s.Handle(http.MethodGet, taskMonitorsURI+"/:id", PrivLogin, func(c echo.Context) error {
		t, ok := s.tasks.get(PrincipalOf(c), c.Param("id"))
		if !ok {
			return ErrResourceNotFound("TaskMonitor", c.Param("id"))
		}
		select {
		case <-t.Done():
		default:
			c.Response().Header().Set("Location", t.MonitorURI())
			c.Response().Header().Set("Retry-After", "1")
			return s.WriteResource(c, http.StatusAccepted, s.taskBody(t))
		}
		t.mu.Lock()
		res, terr := t.result, t.err
		t.mu.Unlock()
		c.Response().Header().Set("Link", "<"+t.URI()+">; rel=describedby")
		if terr != nil {
			return terr
		}
		if res.Location != "" {
			c.Response().Header().Set("Location", res.Location)
		}
		status := res.Status
		if status == 0 {
			status = http.StatusOK
		}
		if res.Body == nil {
			return c.NoContent(status)
		}
		return s.WriteResource(c, status, res.Body)
	})
}
