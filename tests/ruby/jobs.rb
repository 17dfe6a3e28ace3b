# Loaded by a real Sidekiq server: `REDIS_URL=... sidekiq -r jobs.rb -c 2 -q default`.
# EchoJob mirrors fairjob_examples::EchoJob: it RPUSHes "ruby:<arg>" onto the
# list `fairjob-examples:echo` (no namespace).
require 'sidekiq'

Redis.sadd_returns_boolean = false if Redis.respond_to?(:sadd_returns_boolean=)
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)

url = ENV.fetch('REDIS_URL')
Sidekiq.configure_server { |config| config.redis = { url: url } }
Sidekiq.configure_client { |config| config.redis = { url: url } }

class EchoJob
  include Sidekiq::Worker

  def perform(arg)
    Sidekiq.redis { |r| r.rpush('fairjob-examples:echo', "ruby:#{arg}") }
  end
end
