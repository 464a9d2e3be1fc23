// Command turnstile is the CLI of the turnstile inference executor. It holds
// wiring only: it parses flags, builds the packages' configurations from
// them, connects the packages and prints what they return. Domain logic
// (scheduling, admission, routing, the studies' presets and goals) lives in
// the packages it wires: executor, policy, adp, server and bench/....
//
// # One engine configuration
//
// Every command that runs or sizes an engine takes the engine's flags from
// one struct, engineFlags (engine_flags.go), as vLLM derives every entry
// point from one EngineArgs: each flag (--model, --device, --max-batch-size,
// --max-num-batched-tokens, --block-size, --cascade-min-blocks,
// --kv-cache-tokens, --kv-cache-dtype, --workers, --no-overlap, and the
// program policy's --admission and parameters, program_flags.go) is
// registered there once, with one help text, its default stated once
// (defaultEngineFlags) and its own range checked once
// (engineFlags.validate). What the packages check (executor.New,
// seatpool.Seats, the runners, policy.Config.Validate) is left to them, and
// their errors are wrapped with the command's name and the flag. What a
// command does with its engine rather than how the engine is built (--out,
// --seed, --profile) is commandFlags' (command_flags.go), registered,
// defaulted and described there once.
//
// One device vocabulary: --device auto|cpu|cuda[:N]|sim (sim, the
// simulated device, in bench commands; bench agentic takes a list such as
// sim,cpu to compare them). --out is a directory in every command.
//
// # One deployment
//
// serve (and bench serve, which starts serve in-process) and generate
// build what runs with one builder, buildDeployment (deployment.go): from
// the loaded model, the resolved device and every rank's engine and runner
// configuration (a deploymentSpec) it joins the MPI world when launched
// across processes, opens the sharded MLP's communicator, builds one
// runner and one engine per rank of this process, each engine with its own
// guided decoder over the model's one grammar vocabulary (guided.VocabOf),
// the server's grammar cache, and the front end: the engine, or an
// adp.Frontend over the ranks.
//
// # Commands
//
//   - serve: the OpenAI-compatible server over one engine, or over an
//     attention-DP deployment (adp.Frontend) with --dp.
//   - generate: one request through the engine.
//   - bench serve | agentic | adp | calibrate: the load test and the
//     campaigns of package bench.
//   - model inspect | synth, pools --demo, version.
package main
