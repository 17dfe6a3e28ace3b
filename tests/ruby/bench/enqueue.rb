# frozen_string_literal: true

# Enqueue side of fairjob's benchmark for Sidekiq 6.4.1:
#   REDIS_URL=redis://127.0.0.1:PORT ruby enqueue.rb bulk|single N
# Prints the wall and CPU seconds the enqueue took (Ruby start-up and building
# the argument list excluded), nothing else: "<wall> <cpu>".
#   bulk:   Sidekiq::Client.push_bulk in batches of 1,000 (6.4.1 has no batch_size
#           option: one call is one pipelined SADD + LPUSH of all its jobs)
#   single: BenchNoopJob.perform_async in a loop, from one thread

require_relative "jobs"

mode = ARGV.fetch(0)
n = Integer(ARGV.fetch(1))
args = Array.new(n) { |i| [i] }
Sidekiq.redis { |r| r.ping } # connect before the clock starts

started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
cpu_started = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
case mode
when "bulk"
  args.each_slice(1000) { |slice| Sidekiq::Client.push_bulk("class" => BenchNoopJob, "args" => slice) }
when "single"
  args.each { |a| BenchNoopJob.perform_async(*a) }
else
  abort "usage: enqueue.rb bulk|single N"
end
wall = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - cpu_started
puts "#{wall} #{cpu}"
