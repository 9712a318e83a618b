package admission_test

import (
	"context"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/ratelimit"
)

// Submit holds a task in asynq and queues its ticket; Admit takes it in
// order and charges the model's bucket; Release makes the task pending,
// so an asynq worker runs it; Started and Settle close the account.
func ExampleScheduler() {
	srv, err := redistest.Start()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	ctx := context.Background()

	const model = "gpt-example"
	bucket, err := ratelimit.NewBucket(rdb, model, "sk-example", ratelimit.Limits{RequestsPerPeriod: 60, TokensPerPeriod: 10000, Period: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	s, err := admission.New(rdb, map[string]*ratelimit.Bucket{model: bucket}, asynq.NewClientFromRedisClient(rdb), insp, admission.Config{}, discard)
	if err != nil {
		fmt.Println(err)
		return
	}
	state := func(id string) string {
		info, err := insp.GetTaskInfo(jobs.QueuePaid, id)
		if err != nil {
			return err.Error()
		}
		return info.State.String()
	}

	ticket := admission.Ticket{ID: "review-42.acme.api.3-aaaaaaaaaaaa-0", Queue: jobs.QueuePaid, Model: model,
		Class: string(jobs.TierPaid), Tenant: "42", PRSeq: 1, Index: 0, Total: 1, Tokens: 3000}
	task := asynq.NewTask(jobs.TypeReview, []byte(`{}`))
	submitted, err := s.Submit(ctx, task, ticket)
	fmt.Println("submitted:", submitted, err, "| task", state(ticket.ID))
	again, err := s.Submit(ctx, task, ticket)
	fmt.Println("submitted again:", again, err)

	admitted, _, err := s.Admit(ctx, model, 10)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, a := range admitted {
		fmt.Println("admitted:", a.ID, "via", a.Via, "class", a.Class, "tokens", a.Tokens)
	}
	s.Release(ctx, admitted)
	fmt.Println("released: task", state(ticket.ID))

	// the worker's handler starts, calls the model, reports what it used
	fmt.Println("started:", s.Started(ctx, model, ticket.ID))
	fmt.Println("settled:", s.Settle(ctx, model, ticket.ID, ratelimit.Cost{Requests: 1, Tokens: 2500}))
	// Output:
	// submitted: true <nil> | task scheduled
	// submitted again: false <nil>
	// admitted: review-42.acme.api.3-aaaaaaaaaaaa-0 via fair class paid tokens 3000
	// released: task pending
	// started: <nil>
	// settled: <nil>
}
