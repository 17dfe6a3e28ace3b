# frozen_string_literal: true

# Jobs for fairjob's benchmark (tests/src/bin/bench.rs), run by Debian's Sidekiq
# 6.4.1 against a private redis-server: `sidekiq -r <this file> -c 10 -q bench`.
# They mirror the Rust bench jobs of the same class names.

require "sidekiq"

# Debian pairs Sidekiq 6.4.1 with redis-rb 4.8, which prints a deprecation
# warning (with a backtrace) on every push unless told not to: that would halve
# Sidekiq's enqueue rate and measure the warning, not Sidekiq.
Redis.sadd_returns_boolean = false
Redis.silence_deprecations = true

# No log line per job (Sidekiq's own benchmark runs at ERROR too).
Sidekiq.logger.level = Logger::ERROR
Sidekiq.configure_server { |config| config.logger.level = Logger::ERROR }

# A no-op that writes a timestamp marker on its first call and on call N
# (BENCH_N), so the harness measures from the first job start to the N-th perform.
class BenchNoopJob
  include Sidekiq::Worker
  sidekiq_options queue: "bench"

  TARGET = Integer(ENV.fetch("BENCH_N", "0"))
  LOCK = Mutex.new
  @count = 0

  class << self
    attr_accessor :count
  end

  def perform(_index)
    n = LOCK.synchronize { self.class.count += 1 }
    Sidekiq.redis { |r| r.set("bench:first", Time.now.to_f.to_s) } if n == 1
    Sidekiq.redis { |r| r.set("bench:last", Time.now.to_f.to_s) } if n == TARGET
  end
end

# Records enqueue → perform-start latency in microseconds; the argument is the
# enqueue time (Unix seconds) taken by the pusher.
class BenchLatencyJob
  include Sidekiq::Worker
  sidekiq_options queue: "bench_lat"

  def perform(enqueued_at)
    micros = ((Time.now.to_f - enqueued_at.to_f) * 1_000_000).round
    Sidekiq.redis { |r| r.rpush("bench:lat", micros) }
  end
end
