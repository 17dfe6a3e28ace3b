# Rails' ActiveJob on Sidekiq (Debian's ruby-activejob 6.1 + ruby-sidekiq 6.4.1).
#
# As a script: `ruby active_job.rb <redis-url> enqueue` enqueues the jobs a
# fairjob worker must perform with `perform_later` and prints one JSON line
# `{"<name>": "<provider jid>", ...}`.
#
# Loaded by a Sidekiq server (`REDIS_URL=... sidekiq -r active_job.rb -q default`):
# runs the ActiveJob classes fairjob pushes; each appends a JSON line of what it
# received to the list `fairjob-tests:active_job` (no namespace).
require 'json'
require 'logger'
require 'sidekiq'
require 'active_job'
require 'active_support/core_ext/numeric/time'
require 'active_support/core_ext/date/calculations'

Redis.sadd_returns_boolean = false if Redis.respond_to?(:sadd_returns_boolean=)
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)

SCRIPT = __FILE__ == $PROGRAM_NAME
REDIS_URL = (SCRIPT ? ARGV[0] : nil) || ENV['REDIS_URL'] || abort('usage: ruby active_job.rb <redis-url> enqueue')
Sidekiq.configure_client { |config| config.redis = { url: REDIS_URL } }
Sidekiq.configure_server do |config|
  config.redis = { url: REDIS_URL }
  # Poll `schedule` every second or so, from the start (no 10 s initial wait),
  # for the scheduled jobs fairjob pushes.
  Sidekiq.options[:poll_interval_average] = 1
end
Sidekiq.logger = Logger.new($stderr)
Sidekiq.logger.level = Logger::WARN

ActiveJob::Base.queue_adapter = :sidekiq
ActiveJob::Base.logger = Logger.new($stderr, level: Logger::WARN)
Time.zone = 'UTC'

RESULTS = 'fairjob-tests:active_job'

# The ActiveJob classes a fairjob worker performs (the Rust side defines them).
class AjPositionalJob < ActiveJob::Base
  def perform(id, format); end
end

class AjKeywordJob < ActiveJob::Base
  def perform(report_id:, format:); end
end

class AjHashJob < ActiveJob::Base
  def perform(symbols, strings, indifferent); end
end

class AjTimeJob < ActiveJob::Base
  def perform(time, zoned, date, datetime, every, symbol, user); end
end

class AjUnknownJob < ActiveJob::Base
  def perform(x); end
end

# The ActiveJob classes fairjob pushes and this Sidekiq server performs.
def record(name, job, value)
  line = JSON.generate('job' => name, 'value' => value, 'job_id' => job.job_id,
                       'executions' => job.executions, 'locale' => job.locale.to_s,
                       'queue_name' => job.queue_name, 'provider_job_id' => job.provider_job_id)
  Sidekiq.redis { |r| r.rpush(RESULTS, line) }
end

class AjRubyKeywordJob < ActiveJob::Base
  def perform(name:, count:, tags:)
    record('AjRubyKeywordJob', self, 'name' => name, 'count' => count, 'tags' => tags)
  end
end

class AjRubyPositionalJob < ActiveJob::Base
  def perform(id, opts)
    record('AjRubyPositionalJob', self,
           'id' => id, 'opts_keys' => opts.keys.map(&:inspect), 'opts' => opts)
  end
end

# Times from Rust arrive as ISO 8601 strings, durations as seconds.
class AjRubyTimeJob < ActiveJob::Base
  def perform(at, on, every)
    record('AjRubyTimeJob', self,
           'at' => Time.iso8601(at).utc.iso8601(6), 'on' => Date.iso8601(on).to_s,
           'every' => every.seconds.inspect,
           'late_s' => (Time.now - Time.iso8601(enqueued_at)).round(3))
  end
end

if SCRIPT
  abort('usage: ruby active_job.rb <redis-url> enqueue') unless ARGV[1] == 'enqueue'
  user = Struct.new(:id) do
    include GlobalID::Identification
    def self.find(id) = new(id)
  end
  GlobalID.app = 'app'
  Object.const_set(:User, user)
  at = Time.utc(2026, 11, 25, 12, 30, 15, 123_456)
  jobs = {
    'positional' => AjPositionalJob.perform_later(7, 'pdf'),
    'keyword' => AjKeywordJob.perform_later(report_id: 8, format: :csv),
    'hash' => AjHashJob.perform_later({ a: 1, b: [1, 2] }, { 'c' => 'd' },
                                      ActiveSupport::HashWithIndifferentAccess.new(e: 5)),
    'time' => AjTimeJob.perform_later(at, at.in_time_zone('Europe/Berlin'), Date.new(2026, 11, 25),
                                      DateTime.new(2026, 11, 25, 1, 2, 3), 2.hours, :weekly,
                                      User.new(42)),
    'wait' => AjKeywordJob.set(wait: 1.second).perform_later(report_id: 9, format: 'later'),
    'queue' => AjKeywordJob.set(queue: 'reports').perform_later(report_id: 10, format: 'queued'),
    'unknown' => AjUnknownJob.perform_later(1),
    'bad' => AjPositionalJob.perform_later('seven', 'pdf')
  }
  puts JSON.generate(jobs.transform_values(&:provider_job_id))
end
