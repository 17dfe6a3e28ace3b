# ruby retry_set.rb <redis-url>: reads the `retry` zset with Sidekiq's API and
# prints [size, klass, retry_count, error_class, error_message, queue, jid] of
# its first entry (or [0] when empty).
require_relative 'common'

set = Sidekiq::RetrySet.new
job = set.first
if job.nil?
  puts JSON.generate([set.size])
else
  puts JSON.generate([set.size, job.klass, job['retry_count'], job['error_class'], job['error_message'],
                      job.queue, job.jid])
end
